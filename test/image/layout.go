// Package image tests the operator's container image as `make image` writes
// it: an OCI image layout, read here with nothing but the standard library so
// that the test does not share the builder's code.
package image

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Media types of an OCI image layout.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Platform is an image's OS and CPU architecture.
type Platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

func (p Platform) String() string { return p.OS + "/" + p.Architecture }

// Index is an image index (and the layout's index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Manifest is one platform's image manifest.
type Manifest struct {
	MediaType string       `json:"mediaType"`
	Config    Descriptor   `json:"config"`
	Layers    []Descriptor `json:"layers"`
}

// Config is the part of an image configuration the test checks.
type Config struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
		WorkingDir string   `json:"WorkingDir"`
		Env        []string `json:"Env"`
	} `json:"config"`
}

// Layout is an OCI image layout on disk.
type Layout struct{ Dir string }

// Blob reads a blob and checks that its content has its digest and size.
func (l Layout) Blob(d Descriptor) ([]byte, error) {
	algorithm, hexDigest, ok := strings.Cut(d.Digest, ":")
	if !ok || algorithm != "sha256" {
		return nil, fmt.Errorf("digest %q: want sha256:<hex>", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(l.Dir, "blobs", "sha256", hexDigest))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != hexDigest {
		return nil, fmt.Errorf("blob %s has digest sha256:%s", d.Digest, got)
	}
	if int64(len(data)) != d.Size {
		return nil, fmt.Errorf("blob %s has %d bytes, its descriptor says %d", d.Digest, len(data), d.Size)
	}
	return data, nil
}

// JSON reads a blob of the wanted media type into v.
func (l Layout) JSON(d Descriptor, mediaType string, v any) error {
	if d.MediaType != mediaType {
		return fmt.Errorf("blob %s is a %q, want %q", d.Digest, d.MediaType, mediaType)
	}
	data, err := l.Blob(d)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// ImageIndex is the one image index the layout's index.json names.
func (l Layout) ImageIndex() (Descriptor, Index, error) {
	data, err := os.ReadFile(filepath.Join(l.Dir, "index.json"))
	if err != nil {
		return Descriptor{}, Index{}, err
	}
	var top Index
	if err := json.Unmarshal(data, &top); err != nil {
		return Descriptor{}, Index{}, err
	}
	if len(top.Manifests) != 1 {
		return Descriptor{}, Index{}, fmt.Errorf("index.json names %d manifests, want one image index", len(top.Manifests))
	}
	var index Index
	err = l.JSON(top.Manifests[0], mediaTypeIndex, &index)
	return top.Manifests[0], index, err
}

// File is a file of an image's root filesystem.
type File struct {
	Header *tar.Header
	Data   []byte
}

// RootFS applies the layers in order and returns the resulting files by their
// absolute path. Whiteouts are refused: this image has no reason for them.
func (l Layout) RootFS(m Manifest) (map[string]File, error) {
	files := map[string]File{}
	for _, d := range m.Layers {
		if d.MediaType != mediaTypeLayer {
			return nil, fmt.Errorf("layer %s is a %q, want %q", d.Digest, d.MediaType, mediaTypeLayer)
		}
		data, err := l.Blob(d)
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(strings.NewReader(string(data)))
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
			}
			name := path.Clean("/" + h.Name)
			if strings.HasPrefix(path.Base(name), ".wh.") {
				return nil, fmt.Errorf("layer %s: unexpected whiteout %s", d.Digest, name)
			}
			content, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			files[name] = File{Header: h, Data: content}
		}
	}
	return files, nil
}

// Unpack writes a root filesystem under dir with its modes and owners (which
// takes root).
func Unpack(files map[string]File, dir string) error {
	// Parents sort before their children.
	for _, name := range sortedKeys(files) {
		f := files[name]
		target := filepath.Join(dir, filepath.FromSlash(name))
		mode := fs.FileMode(f.Header.Mode).Perm()
		switch f.Header.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.WriteFile(target, f.Data, mode); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected tar entry type %c", name, f.Header.Typeflag)
		}
		if err := os.Chown(target, f.Header.Uid, f.Header.Gid); err != nil {
			return err
		}
		// Chmod after chown, which clears setuid bits, and for the sticky
		// bit, which os.MkdirAll does not set.
		if f.Header.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		if err := os.Chmod(target, mode); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys(files map[string]File) []string {
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
