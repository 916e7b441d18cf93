package runtimes

import "testing"

func TestPythonLean(t *testing.T) {
	for _, c := range []struct {
		code string
		lean bool
	}{
		{"print(1)", true},
		{"x = 1\nfor i in range(3):\n    x *= 2\nprint(x)", true},
		{"import math\nprint(math.pi)", true},
		{"import math, json as j, os.path\nprint(j.dumps(math.pi))", true},
		{"import math\nimport numpy as np", false},
		{"import math, pandas", false},
		{"import math as m, pandas", false},
		{"import os;import pandas", false},
		{"import os,\\\n    pandas", false},
		{"from collections import Counter, OrderedDict as OD\nprint(Counter('ab'))", true},
		{"from os.path import (join,\n    basename)\nprint(join('a', 'b'))", true},
		{"from os import (path,\n)\nimport pandas", false},
		{"from os import *\nimport pandas", false},
		{"from os import path\nfrom pandas import DataFrame", false},
		{"from . import x", false},
		{"from .m import x", false},
		{"from pandas import DataFrame", false},
		{"from matplotlib import pyplot", false},
		{"import matplotlib.pyplot as plt", false},
		{"import scipy", false},
		{"import importlib", false},
		{"import pickle", false},
		{"import gc", false},
		{"def f():\n    yield from range(3)\nprint(list(f()))", true},
		{"try:\n    1/0\nexcept Exception as e:\n    raise ValueError('x') from e", true},
		{"class A:\n    def __init__(self):\n        self.a = 1\n    def __repr__(self):\n        return 'A'\nif __name__ == '__main__':\n    print(A())", true},
		{"from __future__ import annotations\nprint(1)", true},
		// What looks up or imports by name, or lists what is loaded.
		{"__import__('pandas')", false},
		{"print(().__class__.__base__.__subclasses__())", false},
		{"print(__builtins__)", false},
		{"exec('import pandas')", false},
		{"eval('1')", false},
		{"compile('1', 'f', 'eval')", false},
		{"getattr(print, 'x')", false},
		{"print(globals())", false},
		{"print(vars())", false},
		{"help('pandas')", false},
		{"import sys\nprint(sys.modules)", false},
		{"import sys\nprint(sys.getrefcount(None))", false},
		{"import sys\nprint(sys.argv)", true},
		{"import os\nprint(os.sys.modules)", false},
		{"import logging", false},
		{"import operator\nprint(operator.attrgetter('x'))", false},
		{"import typing\nprint(typing.ForwardRef('x'))", false},
		// Strings and comments are read as words too.
		{"print('import pandas')", false},
		{"# pandas later\nprint(1)", true},
		{"# import pandas later\nprint(1)", false},
		// Non-ASCII: an identifier is NFKC-normalised.
		{"ｅｘｅｃ('1')", false},
		{"print('é')", false},
		{"", true},
	} {
		if got := pythonLean(c.code); got != c.lean {
			t.Errorf("pythonLean(%q) = %v, want %v", c.code, got, c.lean)
		}
	}
}

func FuzzPythonLean(f *testing.F) {
	f.Add("import math, pandas")
	f.Add("from os import (path,\n)\nimport pandas")
	f.Fuzz(func(t *testing.T, code string) {
		pythonLean(code) // never panics
	})
}

// A lean program may start on an interpreter without site unless it names
// what shows it (sys.flags); never when it is not lean.
func TestPythonLeanProgram(t *testing.T) {
	for _, c := range []struct {
		code string
		want bool
	}{
		{"print(1)", true},
		{"import sys\nprint(sys.argv)\nexit(2)", true},
		{"import sys\nprint(sys.path)", true},
		{"import sys\nprint(sys.flags)", false},
		{"import sys\nprint(sys.flags.no_site)", false},
		{"import sys\nf = 'no_site'", false},
		{"import pandas", false},
		{"import site", false},
		{"print(__import__('site'))", false},
	} {
		if got := pythonLeanProgram(c.code); got != c.want {
			t.Errorf("pythonLeanProgram(%q) = %v, want %v", c.code, got, c.want)
		}
	}
}
