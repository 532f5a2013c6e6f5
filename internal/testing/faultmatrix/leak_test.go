package faultmatrix

import (
	"encoding/json"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leakRows: a backup killed outright (SIGKILL: no cleanup runs) leaves its
// multipart upload behind; after the store is killed and restarted, MinIO
// lists such an upload only under its exact key. prune must still find it:
// the backup's first object ("started") makes the folder visible, and prune
// lists uploads under each incomplete folder's exact keys.
func leakRows() []row {
	return []row{
		{"store/backup-killed-mid-upload-leak-found-by-prune", func(t *testing.T, w *world) {
			v, m := ownStore(t)
			h := v.proxy.Hold(regexp.MustCompile(`partNumber=`))
			c := w.start(t, append(w.backupArgs(w.stallArgs(t, "backup")...), v.viaProxy()...)...)
			waitHit(t, h, c, "an UploadPart")
			c.signal(syscall.SIGKILL)
			r := c.wait(slack)
			if r.code == 0 {
				t.Fatalf("a SIGKILLed backup exited 0: %s", r)
			}
			h.Release()
			m.Kill()
			m.Start(t)
			waitStoreBack(t, m, v.proxy)
			t.Logf("after the store's restart the prefix-wide listing shows %d upload(s)",
				len(uploadsUnder(t, m.S3(t), v.bucket, v.prefix+"/")))

			bound := time.Minute + slack
			pr := w.run(t, bound, append([]string{"prune", "--cluster-id", clusterID, "--dry-run", "-o", "json"},
				cosArgs(m.Endpoint, v.bucket, v.prefix, v.creds)...)...)
			if !expect(t, "prune --dry-run after the leak", pr, bound, 0) {
				return
			}
			var rep struct {
				Clusters []struct {
					Uploads []struct {
						Key    string `json:"key"`
						Action string `json:"action"`
					} `json:"uploads"`
				} `json:"clusters"`
			}
			if err := json.Unmarshal([]byte(pr.stdout), &rep); err != nil {
				t.Fatalf("prune -o json: %v\n%s", err, pr.stdout)
			}
			var found []string
			for _, cl := range rep.Clusters {
				for _, u := range cl.Uploads {
					if strings.HasPrefix(u.Key, v.prefix+"/"+clusterID+"/") {
						found = append(found, u.Key+" "+u.Action)
					}
				}
			}
			if len(found) == 0 {
				t.Fatalf("prune does not see the upload the killed backup leaked: %s", pr.stdout)
			}
			t.Logf("prune sees: %v", found)
		}},
	}
}
