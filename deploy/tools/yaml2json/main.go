// Command yaml2json reads a stream of YAML documents (what `helm template`
// prints) on stdin and writes each non-empty one as a line of JSON, so that
// airlock's deploy tests can inspect rendered manifests with encoding/json
// alone, without a YAML library in airlock's own module.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	w := bufio.NewWriter(os.Stdout)
	for i, doc := range split(data) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			fail(fmt.Errorf("document %d: %w", i, err))
		}
		if bytes.Equal(j, []byte("null")) {
			continue
		}
		w.Write(j)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		fail(err)
	}
}

// split cuts at lines that are exactly "---".
func split(data []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if string(bytes.TrimRight(line, "\r\n")) == "---" {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "yaml2json:", err)
	os.Exit(1)
}
