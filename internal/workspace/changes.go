package workspace

import "sort"

// Change is a regular file that was created, modified or deleted between
// two snapshots.
type Change struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Change string `json:"change"` // created, modified or deleted
}

type fileState struct {
	size, mtime int64
	ino         uint64
}

// Snapshot is the state of a workspace's regular files at one moment.
type Snapshot map[string]fileState

// TakeSnapshot records the workspace's regular files, up to the listing
// limit (truncated says it was reached); a workspace that cannot be
// listed yields an empty snapshot.
func TakeSnapshot(d *Dir) (s Snapshot, truncated bool) {
	ents, truncated, err := d.List("", true)
	if err != nil {
		return nil, false
	}
	out := make(Snapshot, len(ents))
	for _, e := range ents {
		if e.Type == "file" {
			out[e.Path] = fileState{size: e.Size, mtime: e.ModNano, ino: e.Ino}
		}
	}
	return out, truncated
}

// Changes lists what differs in after, sorted by path. A file rewritten in
// place with the same size and time stamp goes unnoticed, as with make.
func (before Snapshot) Changes(after Snapshot) []Change {
	out := []Change{}
	for p, a := range after {
		b, ok := before[p]
		switch {
		case !ok:
			out = append(out, Change{Path: p, Size: a.size, Change: "created"})
		case a != b:
			out = append(out, Change{Path: p, Size: a.size, Change: "modified"})
		}
	}
	for p, b := range before {
		if _, ok := after[p]; !ok {
			out = append(out, Change{Path: p, Size: b.size, Change: "deleted"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
