package restore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/usage"
)

// PlanTargets is the first stage: it resolves Options.Targets into the
// plan's members and data dirs, sets the token (generated when
// Options.Token is empty) and the bump, and checks every data dir (it, or
// its nearest existing ancestor, writable; a non-empty one refused, or
// with Force marked to be moved aside). A dry run lists the problems in
// plan.Problems; a real run fails at StepDataDirs on the first.
func (c *Config) PlanTargets(plan *Plan) error {
	if step, err := c.planTargets(plan); err != nil {
		return &Error{ClusterID: c.src.clusterID, At: step, Err: err}
	}
	return nil
}

// planTargets is PlanTargets without the step error: members, token and
// bump in the plan, and every data dir checked.
func (c *Config) planTargets(plan *Plan) (string, error) {
	members, _, err := c.targets.resolve()
	if err != nil {
		return StepValidate, usage.Wrap(err)
	}
	plan.Members, plan.InitialCluster = members, c.targets.InitialCluster
	plan.BumpRevision, plan.MarkCompacted = c.bump, c.markCompacted
	plan.Token = c.token
	if plan.Token == "" {
		plan.Token, plan.TokenGenerated = newToken(c.src.clusterID, c.src.now()), true
	}

	// Local checks first: nothing happens if a data dir is in the way.
	for i := range plan.Members {
		m := &plan.Members[i]
		st, err := inspectDir(m.DataDir)
		if err != nil {
			if !c.dryRun {
				return StepDataDirs, fmt.Errorf("member %s: %w", m.Name, err)
			}
			m.Problem = err.Error()
			plan.Problems = append(plan.Problems, fmt.Sprintf("data dir %s of member %s: %v", m.DataDir, m.Name, err))
			continue
		}
		m.State = st
		if err := checkTarget(m.DataDir, st); err != nil {
			m.Problem = err.Error()
			plan.Problems = append(plan.Problems, fmt.Sprintf("data dir %s of member %s cannot be written: %v", m.DataDir, m.Name, err))
			continue
		}
		if st != DirNonEmpty {
			continue
		}
		if !c.force {
			plan.Problems = append(plan.Problems, fmt.Sprintf("data dir %s of member %s is not empty: refusing to overwrite it, as etcdutl does "+
				"(--force moves it aside to %s.moved-<UTC time>; nothing is deleted)", m.DataDir, m.Name, m.DataDir))
			continue
		}
		m.MovedTo = movedName(m.DataDir, c.src.now())
	}
	if len(plan.Problems) > 0 && !c.dryRun {
		return StepDataDirs, &ProblemsError{plan.Problems}
	}
	return "", nil
}

func newToken(clusterID string, now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-restore-%s-%s", clusterID, now.UTC().Format("20060102T150405Z"), hex.EncodeToString(b[:]))
}
