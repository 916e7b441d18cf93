package workspace

import (
	"reflect"
	"testing"
)

func TestChanges(t *testing.T) {
	snap := func(truncated bool, files map[string]fileState) Snapshot {
		return Snapshot{files: files, Truncated: truncated}
	}
	a1, a2, b1 := fileState{size: 1, mtime: 1, ino: 1}, fileState{size: 2, mtime: 2, ino: 1}, fileState{size: 3, mtime: 1, ino: 2}
	for _, tc := range []struct {
		name          string
		before, after Snapshot
		want          []Change
	}{
		{"nothing", snap(false, nil), snap(false, nil), []Change{}},
		{"created, modified, deleted",
			snap(false, map[string]fileState{"a": a1, "b": b1}),
			snap(false, map[string]fileState{"a": a2, "c": b1}),
			[]Change{{"a", 2, "modified"}, {"b", 3, "deleted"}, {"c", 3, "created"}}},
		{"replaced by another file of the same size and time",
			snap(false, map[string]fileState{"a": a1}),
			snap(false, map[string]fileState{"a": {size: 1, mtime: 1, ino: 9}}),
			[]Change{{"a", 1, "modified"}}},
		{"truncated before: what it lacks may have existed",
			snap(true, map[string]fileState{"a": a1, "b": b1}),
			snap(false, map[string]fileState{"a": a2, "c": b1}),
			[]Change{{"a", 2, "modified"}, {"b", 3, "deleted"}}},
		{"truncated after: what it lacks may still exist",
			snap(false, map[string]fileState{"a": a1, "b": b1}),
			snap(true, map[string]fileState{"a": a2, "c": b1}),
			[]Change{{"a", 2, "modified"}, {"c", 3, "created"}}},
		{"workspace gone", snap(false, map[string]fileState{"a": a1}), Snapshot{Truncated: true}, []Change{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.before.Changes(tc.after); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Changes = %v, want %v", got, tc.want)
			}
		})
	}
}
