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
		{"released: runs nothing", true, nil, nil},
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
			// Never twice.
			ran = nil
			if s.Run(); len(ran) != 0 {
				t.Errorf("a second Run ran %v", ran)
			}
		})
	}
}
