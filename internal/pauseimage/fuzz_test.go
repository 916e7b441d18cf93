package pauseimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/workspace"
)

// Fuzzing of the parsers of what persistence.dir holds, which the host
// reads back and trusts nothing of: meta.json, point.json, memory.json,
// kept.json and files.tar. Their corpora (testdata/fuzz) replay in every
// run. Each description is fuzzed twice: as the file (its checksum
// rarely right) and as a body wrapped in an envelope whose checksum
// matches (what someone who knows the format writes).

// enveloped is body in an envelope whose checksum matches.
func enveloped(body []byte) []byte {
	h := sha256.Sum256(body)
	raw, err := json.Marshal(envelope{Version: version, SHA256: hex.EncodeToString(h[:]), Body: json.RawMessage(body)})
	if err != nil {
		// Not JSON: an envelope the encoder could never write; the
		// body as a string instead.
		s, _ := json.Marshal(string(body))
		raw, _ = json.Marshal(envelope{Version: version, SHA256: hex.EncodeToString(h[:]), Body: s})
	}
	return raw
}

func FuzzDecodePoint(f *testing.F) {
	whole, _ := encodePoint(pointBody{Point: Point{Seq: 2, At: time.Unix(1, 0), Session: json.RawMessage(`{"id":"s-1"}`)},
		Entries: []liveEntry{{Path: "a.txt", Mode: 0o644, Size: 3}, {Path: "sub", Dir: true, Mode: 0o755}, {Path: "sub/b", Size: 1, Stage: "2-0"}, {Path: "\xff\x01", Size: 0}}})
	f.Add(whole)
	var env envelope
	json.Unmarshal(whole, &env)
	f.Add([]byte(env.Body))
	for _, body := range []string{
		`{"seq":1,"entries":[{"path":"../x","size":1}]}`,
		`{"seq":1,"entries":[{"path":"/etc/shadow","size":1}]}`,
		`{"seq":1,"entries":[{"path":"a","size":1},{"path":"a","dir":true}]}`,
		`{"seq":1,"entries":[{"path_b64":"YQBi","size":1}]}`,
		`{"seq":1,"entries":[{"path":"a","path_b64":"YQ==","size":1}]}`,
		`{"seq":1,"entries":[{"path":"a","size":1,"stage":"../1-0"}]}`,
		`{"seq":1,"entries":[{"path":"a","size":1,"stage":"."}]}`,
		`{"seq":1,"entries":[{"path":"a","size":-1}]}`,
		`{"seq":1,"entries":[{"path":"a","size":9223372036854775807}]}`,
		`{"seq":0,"entries":[]}`,
		`{"seq":1,"entries":null}`,
		`[]`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, in := range [][]byte{raw, enveloped(raw)} {
			b, err := decodePoint(in)
			if err != nil {
				continue
			}
			if b.Seq < 1 || len(b.Entries) > workspace.MaxListLength {
				t.Fatalf("accepted seq %d with %d entries", b.Seq, len(b.Entries))
			}
			seen := map[string]bool{}
			for _, e := range b.Entries {
				if !entryPath(e.Path) || seen[e.Path] || e.Size < 0 || e.Size > maxRecorded || e.Stage != "" && (!stageName(e.Stage) || strings.ContainsAny(e.Stage, "/.")) {
					t.Fatalf("accepted the entry %+v", e)
				}
				seen[e.Path] = true
			}
			// What it accepts, it writes back the same.
			again, err := encodePoint(b)
			if err != nil {
				t.Fatal(err)
			}
			if b2, err := decodePoint(again); err != nil || len(b2.Entries) != len(b.Entries) {
				t.Fatalf("accepted point.json does not read back: %v", err)
			}
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	whole, _ := encodeMeta(body{Session: json.RawMessage(`{"id":"s-1"}`), Files: filesSum{Size: 1024, SHA256: strings.Repeat("0", 64)},
		Stats: Stats{Files: 1, Bytes: 3, Skipped: []Skipped{{Path: "l", Type: "symlink"}}}})
	f.Add(whole)
	var env envelope
	json.Unmarshal(whole, &env)
	f.Add([]byte(env.Body))
	for _, body := range []string{
		`{"files":{"size":-1}}`,
		`{"files":{"size":9223372036854775807}}`,
		`{"stats":{"bytes":-5}}`,
		`{"session":null,"files":{"size":0,"sha256":""}}`,
		`{"version":2}`,
		``,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, in := range [][]byte{raw, enveloped(raw)} {
			b, err := decodeMeta(in)
			if err == nil && (b.Files.Size < 0 || b.Stats.Bytes < 0 || b.Stats.Files < 0 || b.Stats.Dirs < 0 || b.Files.Size > maxRecorded || b.Stats.Bytes > maxRecorded) {
				t.Fatalf("accepted %+v", b)
			}
		}
	})
}

func FuzzDecodeMemory(f *testing.F) {
	whole, _ := json.Marshal(Memory{Bytes: 10, SHA256: strings.Repeat("a", 64), Keeper: "k", Session: json.RawMessage(`{}`)})
	f.Add(whole)
	f.Add(enveloped(whole))
	f.Add([]byte(`{"bytes":-1}`))
	f.Add([]byte(`{"bytes":4611686018427387904}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, in := range [][]byte{raw, enveloped(raw)} {
			if m, err := decodeMemory(in); err == nil && (m == nil || m.Bytes < 0 || m.Bytes > maxRecorded) {
				t.Fatalf("accepted %+v", m)
			}
		}
	})
}

// FuzzListKept: a kept directory's kept.json, whatever it holds, never
// makes the listing fail or name another directory, and always gives
// an expiry (a kept image is never kept for ever).
func FuzzListKept(f *testing.F) {
	good, _ := json.Marshal(Kept{ID: "s-1", Tenant: "acme", Expires: time.Unix(2e9, 0), Reason: "damaged"})
	f.Add(good)
	f.Add([]byte(`{"id":"../../etc","expires":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"expires":"not a time"}`))
	f.Add([]byte(``))
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		dir := filepath.Join(root, keptImagePrefix+"s-1-20260101T000000.000Z")
		os.RemoveAll(dir)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, keptMeta), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		all, err := ListKept(root, time.Hour)
		if err != nil || len(all) != 1 || all[0].Dir != dir || all[0].Expires.IsZero() {
			t.Fatalf("ListKept: %+v %v", all, err)
		}
	})
}

// FuzzExtract: files.tar, whatever it holds (its checksum rewritten to
// match), writes nothing but files and directories, and only beneath
// the workspace it is restored into.
func FuzzExtract(f *testing.F) {
	tarOf := func(hdrs ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hdrs {
			tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		tw.Close()
		return buf.Bytes()
	}
	f.Add(tarOf(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755}, &tar.Header{Typeflag: tar.TypeReg, Name: "d/a", Size: 3, Mode: 0o644}))
	f.Add(tarOf(&tar.Header{Typeflag: tar.TypeReg, Name: "../escape", Size: 1, Mode: 0o644}))
	f.Add(tarOf(&tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc/shadow"}))
	f.Add(tarOf(&tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: "/etc/shadow"}))
	f.Add(tarOf(&tar.Header{Typeflag: tar.TypeFifo, Name: "p"}))
	f.Add(tarOf(&tar.Header{Typeflag: tar.TypeReg, Name: "/abs", Size: 1, Mode: 0o4755}))
	f.Add(tarOf(&tar.Header{Typeflag: tar.TypeReg, Name: "a", Size: 1}, &tar.Header{Typeflag: tar.TypeDir, Name: "a/b/"}))
	f.Add([]byte("not a tar"))
	base := f.TempDir()
	n := 0
	f.Fuzz(func(t *testing.T, raw []byte) {
		n++
		parent := filepath.Join(base, "p"+strconv.Itoa(n))
		dst := filepath.Join(parent, "ws")
		if err := os.MkdirAll(dst, 0o700); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(parent)
		ws, err := workspace.OpenOut(dst)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		im := &Image{dir: filepath.Join(parent, "s-1")}
		im.extract(context.Background(), tar.NewReader(bytes.NewReader(raw)), ws, 1<<16)
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 || ents[0].Name() != "ws" {
			t.Fatalf("wrote beside the workspace: %v", ents)
		}
		filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !d.Type().IsRegular() {
				t.Errorf("%s: a %v written", p, d.Type())
			}
			if err == nil && d.Type().IsRegular() {
				if fi, _ := d.Info(); fi != nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
					t.Errorf("%s: mode %v", p, fi.Mode())
				}
			}
			return nil
		})
	})
}
