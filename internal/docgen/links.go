package docgen

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// anchor is GitHub's anchor of a heading: lower case, spaces become
// hyphens, and every character but letters, digits, hyphens and
// underscores goes.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	linkRE    = regexp.MustCompile(`\[(?:[^\]\n]|\][^(\n])*\]\(([^)\s]+)\)`)
	codeRE    = regexp.MustCompile("`[^`\n]*`")
	headingRE = regexp.MustCompile(`^#{1,6} +(.*?) *#*$`)
	inlineRE  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// prose is text's lines outside fenced code blocks, with their numbers.
func prose(text string) (lines []string, numbers []int) {
	fence := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if !fence {
			lines, numbers = append(lines, l), append(numbers, i+1)
		}
	}
	return lines, numbers
}

// Anchors are the anchors of a Markdown file's headings, as GitHub makes
// them (a repeated one gets -1, -2...).
func Anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines, _ := prose(text)
	for _, l := range lines {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := anchor(inlineRE.ReplaceAllString(m[1], "$1"))
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// BrokenLinks lists the relative links of the Markdown file at path
// (outside code) whose file does not exist, or whose anchor is no
// heading of the file it names.
func BrokenLinks(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	lines, numbers := prose(string(b))
	for i, l := range lines {
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(l, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
			}
			st, err := os.Stat(dest)
			if err != nil {
				out = append(out, fmt.Sprintf("%s:%d: %s: no such file", path, numbers[i], target))
				continue
			}
			if frag == "" || st.IsDir() || !strings.HasSuffix(dest, ".md") {
				continue
			}
			text, err := os.ReadFile(dest)
			if err != nil {
				return nil, err
			}
			if !Anchors(string(text))[frag] {
				out = append(out, fmt.Sprintf("%s:%d: %s: no heading has the anchor #%s", path, numbers[i], target, frag))
			}
		}
	}
	return out, nil
}
