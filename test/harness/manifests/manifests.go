// Package manifests reads the project's multi-document YAML files
// (config/, the chart's rendering, install.yaml) for the suites that
// create or compare their objects.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Documents splits a multi-document YAML stream into its documents, in
// order, leaving out the empty ones (nothing but comments and blank lines,
// as between two separators).
func Documents(data []byte) ([][]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var fields map[string]any
		if err := utilyaml.Unmarshal(doc, &fields); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(fields) > 0 {
			docs = append(docs, doc)
		}
	}
}
