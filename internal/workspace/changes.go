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
type Snapshot struct {
	files map[string]fileState
	// Truncated: the workspace held more than a listing may (see List),
	// and some files are not in the snapshot.
	Truncated bool
}

// TakeSnapshot records the workspace's regular files, within the listing
// limits; a workspace that cannot be listed yields an empty, truncated
// snapshot.
func TakeSnapshot(d *Dir) Snapshot {
	if d.Empty() {
		// What the listing would find, without it: a warm execution
		// takes two snapshots, and a listing as the sandbox user costs
		// a dozen system calls on a thread of its own.
		return Snapshot{}
	}
	s, err := d.snapshot()
	if err != nil {
		return Snapshot{Truncated: true}
	}
	return s
}

// SnapshotOf is the snapshot of a listing (List's entries and whether
// it was truncated).
func SnapshotOf(ents []Entry, truncated bool) Snapshot {
	out := Snapshot{files: make(map[string]fileState, len(ents)), Truncated: truncated}
	for _, e := range ents {
		if e.Type == "file" {
			out.files[e.Path] = fileState{size: e.Size, mtime: e.ModTime.UnixNano(), ino: e.Ino}
		}
	}
	return out
}

// Same reports whether o records the same files as s, each of the same
// size, time stamp and inode (what Changes would call no change), and
// neither is truncated.
func (s Snapshot) Same(o Snapshot) bool {
	if s.Truncated || o.Truncated || s.files == nil || len(s.files) != len(o.files) {
		return false
	}
	for p, a := range s.files {
		if b, ok := o.files[p]; !ok || a != b {
			return false
		}
	}
	return true
}

// Changes lists what differs in after, sorted by path. A file rewritten in
// place with the same size and time stamp goes unnoticed, as with make.
// What a truncated snapshot lacks is not reported: a file missing from a
// truncated before may have existed, one missing from a truncated after
// may still exist.
func (before Snapshot) Changes(after Snapshot) []Change {
	out := []Change{}
	for p, a := range after.files {
		b, ok := before.files[p]
		switch {
		case !ok && !before.Truncated:
			out = append(out, Change{Path: p, Size: a.size, Change: "created"})
		case ok && a != b:
			out = append(out, Change{Path: p, Size: a.size, Change: "modified"})
		}
	}
	if !after.Truncated {
		for p, b := range before.files {
			if _, ok := after.files[p]; !ok {
				out = append(out, Change{Path: p, Size: b.size, Change: "deleted"})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
