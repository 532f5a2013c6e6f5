package testfix

import (
	"fmt"
	"sort"
)

// DiffMaps names, sorted, each key of want that got lacks ("k: missing")
// or holds another value, and each key of got that want lacks ("k: " +
// extra, say "not in the source"); none when they are equal.
func DiffMaps(want, got map[string]string, extra string) []string {
	var diffs []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, k+": missing")
		} else if g != v {
			diffs = append(diffs, fmt.Sprintf("%s:\n  got  %s\n  want %s", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k+": "+extra)
		}
	}
	sort.Strings(diffs)
	return diffs
}
