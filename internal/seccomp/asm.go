package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
)

// loOffset is where the low 32 bits of a 64-bit syscall argument sit.
var loOffset = func() uint32 {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return 0
	}
	return 4
}()

// asm is a tiny forward-only assembler with named labels for the filter's
// guard; the library's assembler does not expose raw loads.
type asm struct {
	ins    []bpf.Instruction
	fixups []fixup
	labels map[string]int
}

type fixup struct {
	at          int
	true, false string // "" means the next instruction
}

func (a *asm) ld(off uint32) { a.ins = append(a.ins, bpf.LoadAbsolute{Off: off, Size: 4}) }
func (a *asm) and(v uint32) {
	a.ins = append(a.ins, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: v})
}
func (a *asm) ret(v uint32)   { a.ins = append(a.ins, bpf.RetConstant{Val: v}) }
func (a *asm) label(l string) { a.labels[l] = len(a.ins) }

func (a *asm) jump(cond bpf.JumpTest, v uint32, t, f string) {
	a.fixups = append(a.fixups, fixup{at: len(a.ins), true: t, false: f})
	a.ins = append(a.ins, bpf.JumpIf{Cond: cond, Val: v})
}
func (a *asm) jeq(v uint32, t, f string)  { a.jump(bpf.JumpEqual, v, t, f) }
func (a *asm) jgt(v uint32, t, f string)  { a.jump(bpf.JumpGreaterThan, v, t, f) }
func (a *asm) jge(v uint32, t, f string)  { a.jump(bpf.JumpGreaterOrEqual, v, t, f) }
func (a *asm) jset(v uint32, t, f string) { a.jump(bpf.JumpBitsSet, v, t, f) }

// ja jumps unconditionally, encoded as a JumpIf that is always true so
// that the same fixup logic applies.
func (a *asm) ja(l string) {
	a.fixups = append(a.fixups, fixup{at: len(a.ins), true: l, false: l})
	a.ins = append(a.ins, bpf.Jump{})
}

func (a *asm) assemble() ([]bpf.Instruction, error) {
	skip := func(from int, l string) (int, error) {
		if l == "" {
			return 0, nil
		}
		to, ok := a.labels[l]
		if !ok {
			return 0, fmt.Errorf("seccomp: undefined label %q", l)
		}
		d := to - from - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp: jump to %q out of range (%d)", l, d)
		}
		return d, nil
	}
	for _, f := range a.fixups {
		t, err := skip(f.at, f.true)
		if err != nil {
			return nil, err
		}
		switch in := a.ins[f.at].(type) {
		case bpf.Jump:
			in.Skip = uint32(t)
			a.ins[f.at] = in
		case bpf.JumpIf:
			fl, err := skip(f.at, f.false)
			if err != nil {
				return nil, err
			}
			in.SkipTrue, in.SkipFalse = uint8(t), uint8(fl)
			a.ins[f.at] = in
		}
	}
	return a.ins, nil
}
