package cleanup

import (
	"errors"
	"slices"
	"testing"
)

func TestStack(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	cases := []struct {
		name    string
		release bool
		want    []int
		errs    []error
	}{
		{"runs in reverse order, joins errors", false, []int{3, 2, 1}, []error{e1, e2}},
		// Release forgets what was pushed before it, not what comes after.
		{"released: runs only later undos", true, []int{4}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s Stack
			var ran []int
			s.Add(func() error { ran = append(ran, 1); return e1 })
			s.AddFunc(func() { ran = append(ran, 2) })
			s.Add(func() error { ran = append(ran, 3); return e2 })
			if c.release {
				s.Release()
				s.AddFunc(func() { ran = append(ran, 4) })
			}
			err := s.Run()
			if !slices.Equal(ran, c.want) {
				t.Errorf("ran %v, want %v", ran, c.want)
			}
			for _, e := range c.errs {
				if !errors.Is(err, e) {
					t.Errorf("error %v does not include %v", err, e)
				}
			}
			if c.errs == nil && err != nil {
				t.Errorf("error %v", err)
			}
			// Never twice: in both cases the first Run ran something, which
			// a second Run must not run again.
			if len(ran) == 0 {
				t.Fatal("the first Run ran nothing; the check below would be vacuous")
			}
			ran = nil
			if err := s.Run(); len(ran) != 0 || err != nil {
				t.Errorf("a second Run ran %v, error %v", ran, err)
			}
		})
	}
}
