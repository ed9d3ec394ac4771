package manifests

import (
	"strings"
	"testing"
)

func TestDocumentsLeavesOutEmptyOnes(t *testing.T) {
	stream := "# a header\n---\nkind: A\nmetadata:\n  name: a\n---\n# only a comment\n---\n\n---\nkind: B\n"
	docs, err := Documents([]byte(stream))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 {
		t.Fatalf("got %d documents, want 2: %q", len(docs), docs)
	}
	if !strings.Contains(string(docs[0]), "kind: A") || !strings.Contains(string(docs[1]), "kind: B") {
		t.Errorf("documents out of order or cut: %q", docs)
	}
}

func TestDocumentsNamesTheBadOne(t *testing.T) {
	_, err := Documents([]byte("kind: A\n---\nkind: [B\n"))
	if err == nil || !strings.Contains(err.Error(), "document 1") {
		t.Fatalf("got %v, want an error naming document 1", err)
	}
}
