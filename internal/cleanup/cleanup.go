// Package cleanup owns undoing half-done setup: each step that acquires something
// pushes its undo, and unless Release is called the undos run in reverse
// order (gVisor's pkg/cleanup).
//
// It must never swallow a panic or run an undo twice.
package cleanup

import "errors"

// Stack is a LIFO of undo functions. The zero value is ready to use.
type Stack struct {
	fns []func() error
}

// Add pushes an undo.
func (s *Stack) Add(fn func() error) { s.fns = append(s.fns, fn) }

// AddFunc pushes an undo that cannot fail.
func (s *Stack) AddFunc(fn func()) { s.Add(func() error { fn(); return nil }) }

// Release forgets every undo: setup succeeded and the caller owns it all.
func (s *Stack) Release() { s.fns = nil }

// Run runs every undo in reverse order and joins their errors.
func (s *Stack) Run() error {
	var errs []error
	for i := len(s.fns) - 1; i >= 0; i-- {
		if err := s.fns[i](); err != nil {
			errs = append(errs, err)
		}
	}
	s.fns = nil
	return errors.Join(errs...)
}
