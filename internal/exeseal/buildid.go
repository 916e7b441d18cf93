package exeseal

import (
	"encoding/binary"
	"io"
	"os"
	"slices"
	"strings"
)

// BuildID returns the running binary's Go build ID, or "" when it has
// none (built with -ldflags=-buildid=), it cannot be read, or it is not
// in the go command's form. Its last part is a hash of the binary's
// content, so it changes with anything built into it: the files
// embedded in it name themselves by it.
func BuildID() string {
	return goCommandID(exeBuildID())
}

// goCommandID is id when it has the go command's form for an executable
// (four non-empty parts, separated by '/'), else "". A build that sets
// the ID itself (Bazel and Nix write -buildid=redacted) keeps one ID
// across builds, so it names nothing.
func goCommandID(id string) string {
	parts := strings.Split(id, "/")
	if len(parts) != 4 || slices.Contains(parts, "") {
		return ""
	}
	return id
}

func exeBuildID() string {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return ""
	}
	defer f.Close()
	// Go's linker puts the note in the first page, after the headers.
	b := make([]byte, 16<<10)
	n, err := io.ReadFull(f, b)
	if err != nil && err != io.ErrUnexpectedEOF {
		return ""
	}
	return goBuildID(b[:n])
}

// goBuildID finds the Go build ID note (owner "Go", type 4) in the
// PT_NOTE segments of the 64-bit little-endian ELF image that starts
// with b, within b.
func goBuildID(b []byte) string {
	if len(b) < 64 || string(b[:4]) != "\x7fELF" || b[4] != 2 || b[5] != 1 {
		return ""
	}
	le := binary.LittleEndian
	phoff, phentsize, phnum := le.Uint64(b[0x20:]), uint64(le.Uint16(b[0x36:])), uint64(le.Uint16(b[0x38:]))
	if phentsize < 56 || phoff > uint64(len(b)) || phnum > (uint64(len(b))-phoff)/phentsize {
		return ""
	}
	for i := range phnum {
		ph := b[phoff+i*phentsize:]
		const ptNote = 4
		if le.Uint32(ph) != ptNote {
			continue
		}
		off, size := le.Uint64(ph[8:]), le.Uint64(ph[32:])
		if off > uint64(len(b)) || size > uint64(len(b))-off {
			continue
		}
		for notes := b[off : off+size]; len(notes) >= 12; {
			namesz, descsz, typ := uint64(le.Uint32(notes)), uint64(le.Uint32(notes[4:])), le.Uint32(notes[8:])
			name := 12 + (namesz+3)&^3
			end := name + (descsz+3)&^3
			if end > uint64(len(notes)) {
				break
			}
			const goBuildIDType = 4
			if typ == goBuildIDType && string(notes[12:12+namesz]) == "Go\x00\x00" {
				return string(notes[name : name+descsz])
			}
			notes = notes[end:]
		}
	}
	return ""
}
