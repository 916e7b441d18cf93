package runtimes

// The lean template's scan: which Python code a runtime forked from a
// template that preloaded nothing serves exactly as one forked from the
// full template (numpy, pandas and matplotlib imported) would. It is a
// speed hint, never a security decision: both run in the same jail, and
// a runtime started cold (the template down) preloads nothing either.
// It must be sure, though: code it lets through must not be able to tell
// which template it runs on, short of reading the process's memory
// figures or mappings from /proc, or of spelling a name in pieces and
// looking it up through a format string ("{0.mod" "ules}"), which no
// scan of the text follows. Anything it does not recognise keeps the full
// template.
//
// The rule: ASCII only (identifiers are NFKC-normalised: a non-ASCII one
// may spell any name); every word, strings and comments included, not
// one that looks up or imports by name (eval, exec, getattr, globals …)
// or lists what is loaded (modules, get_objects, getrefcount …); no
// dunder name but a few of the language's own (__init__, __name__ …: no
// __import__, __class__, __builtins__); and every import of a module from
// leanModules, standard modules that import nothing by a name they are
// given and reach nothing of the preloaded libraries.

// leanModules are the modules (first component) code may import and
// still run on the lean template.
var leanModules = setOf(
	"__future__", "abc", "argparse", "array", "base64", "binascii", "bisect", "bz2",
	"calendar", "cmath", "collections", "colorsys", "contextlib", "copy", "csv",
	"dataclasses", "datetime", "decimal", "difflib", "enum", "errno", "fnmatch",
	"fractions", "functools", "glob", "gzip", "hashlib", "heapq", "hmac", "html",
	"io", "ipaddress", "itertools", "json", "keyword", "lzma", "math", "numbers",
	"operator", "os", "pathlib", "pprint", "queue", "random", "re", "reprlib",
	"secrets", "shlex", "shutil", "socket", "stat", "statistics", "string",
	"struct", "subprocess", "sys", "tempfile", "textwrap", "threading", "time",
	"traceback", "typing", "unicodedata", "uuid", "zlib", "zoneinfo",
)

// leanDenied are words that import or look up by a name made at run time,
// or list what the interpreter has loaded or allocated.
var leanDenied = setOf(
	"eval", "exec", "compile", "getattr", "setattr", "delattr", "globals", "locals",
	"vars", "help", "breakpoint",
	"modules", "path_importer_cache", "meta_path", "path_hooks", "get_objects",
	"get_referrers", "get_referents", "getrefcount", "getallocatedblocks",
	"loggerDict", "f_globals", "f_builtins", "f_back", "tb_frame", "gi_frame",
	"cr_frame", "_getframe", "settrace", "setprofile", "audit", "addaudithook",
	"attrgetter", "methodcaller", "ForwardRef", "_evaluate",
)

// leanDunders are the dunder names code may use: the protocol methods a
// class defines and the module's own name.
var leanDunders = setOf(
	"__name__", "__main__", "__future__", "__init__", "__post_init__", "__repr__",
	"__str__", "__format__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
	"__ge__", "__hash__", "__bool__", "__len__", "__iter__", "__next__",
	"__contains__", "__getitem__", "__setitem__", "__delitem__", "__enter__",
	"__exit__", "__call__", "__add__", "__radd__", "__sub__", "__rsub__",
	"__mul__", "__rmul__", "__truediv__", "__floordiv__", "__mod__", "__pow__",
	"__neg__", "__abs__", "__slots__", "__doc__",
)

// leanProgramDenied are words a lean program must not use either to run
// on an interpreter started without site (leanProgramArgs): sys.flags
// shows it.
var leanProgramDenied = setOf("flags", "no_site")

// pythonLeanProgram reports whether a program file's code may run on an
// interpreter started without site (python3 -S, the runtime then giving
// it site's builtins and directories): lean code (pythonLean) imports only
// standard modules and cannot list what is loaded, so what site's .pth
// files and sitecustomize set up (import hooks, namespace packages) is out
// of its reach; the flag itself is not, so code that names sys.flags is
// not lean here. False when unsure.
func pythonLeanProgram(code string) bool {
	if !pythonLean(code) {
		return false
	}
	for _, w := range scanWords(code) {
		if leanProgramDenied[w.text] {
			return false
		}
	}
	return true
}

func setOf(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// pythonLean reports whether code may run on the lean template (see the
// rule above); false when unsure.
func pythonLean(code string) bool {
	for i := 0; i < len(code); i++ {
		if code[i] >= 0x80 {
			return false
		}
	}
	words := scanWords(code)
	for _, w := range words {
		if leanDenied[w.text] || len(w.text) > 2 && w.text[:2] == "__" && !leanDunders[w.text] {
			return false
		}
	}
	// Every import: any "import" word not read as part of a from-import
	// below is read as an import statement's.
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w.text == "from":
			// from M import ... (else `yield from`, `raise ... from`).
			mod, next, ok := dottedName(code, words, i+1)
			if !ok || !blank(between(code, w, words[i+1])) || next >= len(words) || words[next].text != "import" || !blank(between(code, words[next-1], words[next])) {
				if startsImportFrom(code, w) {
					return false // a relative import, or one unread
				}
				continue
			}
			if !leanModules[mod] {
				return false
			}
			i = skipImportNames(code, words, next+1) - 1
		case w.text == "import":
			j := i + 1
			if j < len(words) && !blank(between(code, w, words[j])) {
				return false
			}
			for {
				mod, next, ok := dottedName(code, words, j)
				if !ok || !leanModules[mod] {
					return false
				}
				j = next
				if j+1 < len(words) && words[j].text == "as" && adjacent(code, words[j-1], words[j]) {
					j += 2 // as, and the alias
				}
				if j >= len(words) || !commaBetween(code, words[j-1], words[j]) {
					break
				}
			}
			i = j - 1
		}
	}
	return true
}

type word struct {
	text       string
	start, end int
}

func isWordByte(c byte, first bool) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

// scanWords lists code's words (identifiers, keywords, and the letters of
// numbers' suffixes alike).
func scanWords(code string) []word {
	var out []word
	for i := 0; i < len(code); {
		if !isWordByte(code[i], true) {
			if '0' <= code[i] && code[i] <= '9' {
				for i < len(code) && isWordByte(code[i], false) {
					i++
				}
				continue
			}
			i++
			continue
		}
		j := i + 1
		for j < len(code) && isWordByte(code[j], false) {
			j++
		}
		out = append(out, word{code[i:j], i, j})
		i = j
	}
	return out
}

// between is the text between two words.
func between(code string, a, b word) string { return code[a.end:b.start] }

// blank reports whether s is only spaces, tabs, line continuations and
// (inside brackets) newlines.
func blank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\\', '\n', '\r', '(':
		default:
			return false
		}
	}
	return true
}

func adjacent(code string, a, b word) bool { return blank(between(code, a, b)) }

func commaBetween(code string, a, b word) bool {
	s := between(code, a, b)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\\', '\n', '\r', ',':
		default:
			return false
		}
	}
	return countByte(s, ',') == 1
}

func countByte(s string, c byte) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
		}
	}
	return n
}

// dottedName reads the module name a.b.c starting at words[i]; it returns its first component and the index of the
// word after it.
func dottedName(code string, words []word, i int) (string, int, bool) {
	if i >= len(words) || i == 0 {
		return "", i, false
	}
	first := words[i].text
	j := i + 1
	for j < len(words) && between(code, words[j-1], words[j]) == "." {
		j++
	}
	return first, j, true
}

// startsImportFrom reports whether the word after "from" w is a relative
// module (from . import x, from .m import y).
func startsImportFrom(code string, w word) bool {
	for i := w.end; i < len(code); i++ {
		switch code[i] {
		case ' ', '\t', '\\':
		case '.':
			return true
		default:
			return false
		}
	}
	return false
}

// skipImportNames skips the names of `from M import a as b, c` (or a
// parenthesised list) starting at words[i] and returns the index of the
// word after them.
func skipImportNames(code string, words []word, i int) int {
	for i < len(words) {
		if w := words[i].text; w == "import" || w == "from" {
			return i // never skips a statement's keyword
		}
		if i+1 < len(words) && words[i+1].text == "as" && adjacent(code, words[i], words[i+1]) {
			i += 2
			if i >= len(words) {
				return i
			}
		}
		if i+1 >= len(words) {
			return i + 1
		}
		s := between(code, words[i], words[i+1])
		if !commaBetween(code, words[i], words[i+1]) && !(countByte(s, ',') == 1 && onlyListBytes(s)) {
			return i + 1
		}
		i++
	}
	return i
}

// onlyListBytes: what may stand between two names of a parenthesised
// import list.
func onlyListBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\\', '\n', '\r', ',', '(', ')':
		default:
			return false
		}
	}
	return true
}
