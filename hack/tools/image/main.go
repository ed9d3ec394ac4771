// Command image assembles the manager's multi-arch container image as an OCI
// image layout, with no container engine and no registry: one image per
// platform, each made of a base layer (what distroless/static:nonroot
// provides: passwd and group entries for root and nonroot, a CA bundle, /tmp
// and nonroot's home) and a layer holding the static manager binary as
// /manager, run as 65532:65532. Every timestamp is the -created time, so two
// runs on the same binaries write the same digests.
//
//	image -out dist/image -tag v0.1.0 -created 1700000000 \
//	  -binary linux/amd64=dist/.image/manager-linux-amd64 \
//	  -binary linux/arm64=dist/.image/manager-linux-arm64
//
// With -name, the binary is /NAME and the image's title is NAME: the node
// cluster's pod sandbox (pause) and test workload (worker) images are built
// the same way (make node-images).
//
//	image -out dist/node-images/worker -tag v1 -name worker \
//	  -binary linux/amd64=dist/.image/worker-linux-amd64
package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const (
	// nonroot is distroless's unprivileged user and group.
	nonroot = 65532
	// caBundle is where distroless (and Debian) keep the CA bundle, and where
	// Go's crypto/x509 looks first on Linux.
	caBundle = "etc/ssl/certs/ca-certificates.crt"
	// source is the repository, for the image's annotations.
	source = "https://github.com/indexed-batch-job/indexed-batch-job"
)

// platformBinary is the manager binary built for a platform.
type platformBinary struct {
	platform v1.Platform
	path     string
}

// binaries collects the repeated -binary os/arch=path flags.
type binaries []platformBinary

func (b *binaries) String() string { return fmt.Sprint(*b) }

func (b *binaries) Set(s string) error {
	platform, file, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(platform, "/")
	if !ok || !ok2 || file == "" {
		return fmt.Errorf("want os/arch=path, got %q", s)
	}
	*b = append(*b, platformBinary{v1.Platform{OS: osName, Architecture: arch}, file})
	return nil
}

func main() {
	var (
		bins    binaries
		out     = flag.String("out", "dist/image", "the OCI image layout to write (replaced)")
		tag     = flag.String("tag", "latest", "the image's version, its ref.name in the layout")
		created = flag.Int64("created", 0, "the time of every file and of the image, in seconds since 1970 (the commit's time)")
		name    = flag.String("name", "manager", "the binary's name in the image (/NAME, the entrypoint); any other than manager is also the image's title")
	)
	flag.Var(&bins, "binary", "os/arch=path of a static manager binary; repeat for each platform")
	flag.Parse()
	if len(bins) == 0 {
		fmt.Fprintln(os.Stderr, "image: no -binary given")
		os.Exit(2)
	}
	digest, err := build(*out, *tag, *name, time.Unix(*created, 0).UTC(), bins)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s: image index %s\n", *out, digest)
}

func build(out, tag, name string, created time.Time, bins binaries) (v1.Hash, error) {
	base, err := baseLayer(created)
	if err != nil {
		return v1.Hash{}, err
	}
	title := "indexed-batch-job"
	if name != "manager" {
		title = name
	}
	annotations := map[string]string{
		"org.opencontainers.image.source":  source,
		"org.opencontainers.image.version": tag,
		"org.opencontainers.image.created": created.Format(time.RFC3339),
		"org.opencontainers.image.title":   title,
	}
	var index v1.ImageIndex = empty.Index
	index = mutate.IndexMediaType(index, types.OCIImageIndex)
	for _, b := range bins {
		img, err := platformImage(base, b.platform, name, b.path, created, annotations)
		if err != nil {
			return v1.Hash{}, err
		}
		platform := b.platform
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &platform},
		})
	}
	index = mutate.Annotations(index, annotations).(v1.ImageIndex)

	if err := os.RemoveAll(out); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendIndex(index, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return v1.Hash{}, err
	}
	return index.Digest()
}

// platformImage is the image of one platform: the base layer, then the
// binary as /name.
func platformImage(base v1.Layer, platform v1.Platform, name, binary string, created time.Time, annotations map[string]string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	binaryLayer, err := layer(created, []file{{name: name, mode: 0o755, data: data}})
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: "base: passwd, group, CA certificates, /tmp, /home/nonroot",
		}},
		mutate.Addendum{Layer: binaryLayer, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: name + ": CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' " + sourcePackage(name),
		}},
	)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
	cfg.Created = v1.Time{Time: created}
	cfg.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		Entrypoint: []string{"/" + name},
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"SSL_CERT_FILE=/" + caBundle,
		},
		Labels: annotations,
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, annotations).(v1.Image), nil
}

// sourcePackage is the package a binary of the image is built from.
func sourcePackage(name string) string {
	if name == "manager" {
		return "./cmd"
	}
	return "./test/nodeimages/" + name
}

// baseLayer holds what distroless/static:nonroot holds for a static Go
// binary.
func baseLayer(created time.Time) (v1.Layer, error) {
	certs, err := caCertificates()
	if err != nil {
		return nil, err
	}
	return layer(created, []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot))},
		{name: "etc/group", mode: 0o644, data: []byte(
			"root:x:0:\n" +
				"nobody:x:65534:\n" +
				fmt.Sprintf("nonroot:x:%d:\n", nonroot))},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: caBundle, mode: 0o644, data: certs},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonroot},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
	})
}

// caCertificates is the Mozilla (NSS) root store as Go's
// x509roots/fallback bundles it, pinned by the module's version rather than
// taken from the building machine. Roots that NSS trusts only with a
// constraint (distrusted after a date) cannot carry it in a PEM bundle and
// are left out, as trusting them without it would trust too much.
func caCertificates() ([]byte, error) {
	var buf bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		cert, err := x509.ParseCertificate(root.Certificate)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&buf, "# %s\n", cert.Subject)
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// file is an entry of a layer; a name ending in / is a directory.
type file struct {
	name string
	mode int64
	uid  int
	data []byte
}

// layer writes files, in order, into an uncompressed tar with fixed times and
// owners, and makes it a gzip-compressed OCI layer (compress/gzip writes the
// same bytes for the same input).
func layer(created time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.uid,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if f.uid != 0 {
			h.Uname, h.Gname = "nonroot", "nonroot"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Clean(f.name), err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
