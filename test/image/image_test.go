package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// nonroot is the user and group the image runs as.
const nonroot = 65532

// wantPlatforms are the platforms `make image` builds by default.
var wantPlatforms = []string{"linux/amd64", "linux/arm64"}

// elfMachine is the ELF machine of a binary built for each architecture.
var elfMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// layoutDir is the image layout under test: $IBJ_IMAGE, which `make
// test-image` sets after building it.
func layoutDir(t *testing.T) string {
	dir := os.Getenv("IBJ_IMAGE")
	if dir == "" {
		t.Skip("IBJ_IMAGE is not set: `make test-image` builds the image and runs this test on it")
	}
	return dir
}

type platformImage struct {
	manifest Manifest
	config   Config
	files    map[string]File
}

// readImages reads every platform's image of the layout.
func readImages(t *testing.T, l Layout) map[string]platformImage {
	t.Helper()
	_, index, err := l.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]platformImage{}
	for _, d := range index.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		var img platformImage
		if err := l.JSON(d, mediaTypeManifest, &img.manifest); err != nil {
			t.Fatal(err)
		}
		if err := l.JSON(img.manifest.Config, mediaTypeConfig, &img.config); err != nil {
			t.Fatal(err)
		}
		if img.files, err = l.RootFS(img.manifest); err != nil {
			t.Fatal(err)
		}
		images[d.Platform.String()] = img
		if got := img.config.OS + "/" + img.config.Architecture; got != d.Platform.String() {
			t.Errorf("the index lists %s for an image whose configuration says %s", d.Platform, got)
		}
	}
	return images
}

// TestImageLayout checks what `make image` wrote: one image per platform,
// each running /manager, a static stripped binary of its architecture and
// the image's one executable, which links the Kueue integration, as
// 65532:65532, with the files distroless/static:nonroot provides.
func TestImageLayout(t *testing.T) {
	l := Layout{Dir: layoutDir(t)}
	images := readImages(t, l)
	platforms := make([]string, 0, len(images))
	for p := range images {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)
	if diff := cmp.Diff(wantPlatforms, platforms); diff != "" {
		t.Fatalf("platforms (-want +got):\n%s", diff)
	}

	kueueVersion := requiredVersion(t, "sigs.k8s.io/kueue")
	for platform, img := range images {
		t.Run(platform, func(t *testing.T) {
			cfg := img.config.Config
			if cfg.User != "65532:65532" {
				t.Errorf("user %q, want 65532:65532", cfg.User)
			}
			if diff := cmp.Diff([]string{"/manager"}, cfg.Entrypoint); diff != "" {
				t.Errorf("entrypoint (-want +got):\n%s", diff)
			}
			if len(cfg.Cmd) != 0 {
				t.Errorf("cmd %q, want none", cfg.Cmd)
			}

			expectStaticBinary(t, img.files, "/manager", strings.TrimPrefix(platform, "linux/"))
			expectLinksKueue(t, img.files, "/manager", kueueVersion)
			for name, f := range img.files {
				if f.Header.Typeflag == tar.TypeReg && f.Header.Mode&0o111 != 0 && name != "/manager" {
					t.Errorf("%s is executable: the image has one binary, /manager", name)
				}
			}

			expectLine(t, img.files, "/etc/passwd", "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin")
			expectLine(t, img.files, "/etc/passwd", "root:x:0:0:root:/root:/sbin/nologin")
			expectLine(t, img.files, "/etc/group", "nonroot:x:65532:")
			expectDir(t, img.files, "/tmp", 0o1777, 0)
			expectDir(t, img.files, "/home/nonroot", 0o700, nonroot)

			certs := caCertificates(t, img.files["/etc/ssl/certs/ca-certificates.crt"].Data)
			if len(certs) < 100 {
				t.Errorf("the CA bundle has %d certificates, want the Mozilla root store (over 100)", len(certs))
			}
		})
	}
}

// imageFile is the image's file name; it fails the test if there is none.
func imageFile(t *testing.T, files map[string]File, name string) (File, bool) {
	t.Helper()
	f, ok := files[name]
	if !ok {
		t.Errorf("no %s", name)
	}
	return f, ok
}

func expectLine(t *testing.T, files map[string]File, name, line string) {
	t.Helper()
	f, ok := imageFile(t, files, name)
	if !ok {
		return
	}
	if !slices.Contains(strings.Split(string(f.Data), "\n"), line) {
		t.Errorf("%s has no line %q:\n%s", name, line, f.Data)
	}
}

func expectDir(t *testing.T, files map[string]File, name string, mode int64, owner int) {
	t.Helper()
	f, ok := imageFile(t, files, name)
	if !ok {
		return
	}
	if f.Header.Mode&0o7777 != mode || f.Header.Uid != owner || f.Header.Gid != owner {
		t.Errorf("%s: mode %o owner %d:%d, want %o owned by %d", name, f.Header.Mode&0o7777, f.Header.Uid, f.Header.Gid, mode, owner)
	}
}

func caCertificates(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("the CA bundle holds a certificate that does not parse: %v", err)
		}
		if !cert.IsCA {
			t.Errorf("the CA bundle holds %s, which is no CA", cert.Subject)
		}
		certs = append(certs, cert)
	}
	return certs
}

// TestImageRunsSeedExample unpacks the host's platform image and runs its
// entrypoint as the operator of a local cluster (etcd, kube-apiserver, kwok),
// the way a container runtime would run it: as 65532:65532, chrooted into the
// image's root filesystem mounted read-only, with a writable /tmp (the
// manifests' emptyDir for the webhook certificate) holding the kubeconfig.
// The operator then takes the seed example to its exact final status, its
// admission webhook answering the create.
func TestImageRunsSeedExample(t *testing.T) {
	l := Layout{Dir: layoutDir(t)}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if missing := kwokcluster.MissingBinaries(root, kwokcluster.KwokKubelets); len(missing) > 0 {
		t.Fatalf("missing %v: `make test-image` builds them", missing)
	}
	if os.Geteuid() != 0 {
		t.Fatal("running the image's entrypoint chrooted as another user takes root (unshare, mount, chroot)")
	}
	platform := "linux/" + runtime.GOARCH
	img, ok := readImages(t, l)[platform]
	if !ok {
		t.Fatalf("the image has no %s variant to run here", platform)
	}

	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := Unpack(img.files, rootfs); err != nil {
		t.Fatal(err)
	}
	// The pod's writable volume, mounted on the image's /tmp.
	volume := filepath.Join(dir, "volume")
	if err := os.Mkdir(volume, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(volume, nonroot, nonroot); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster, err := kwokcluster.Start(ctx, kwokcluster.Options{Root: root, Dir: filepath.Join(dir, "cluster"), Nodes: 2, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Error(err)
		}
	})
	kubeconfig, err := os.ReadFile(cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(volume, "kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(volume, "kubeconfig"), nonroot, nonroot); err != nil {
		t.Fatal(err)
	}

	probe, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--kubeconfig=/tmp/kubeconfig",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe),
		"--pod-failure-backoff=1s",
	}, cluster.WebhookArgs(0, "/tmp/webhook-certs")...)
	// unshare gives the command a mount namespace of its own, where the
	// root filesystem is bound read-only and the volume on its /tmp; chroot
	// then runs the entrypoint as nonroot, as a runtime honouring the
	// image's User would.
	script := `set -e
mount --make-rprivate /
mount --bind "$ROOTFS" "$ROOTFS"
mount --bind "$VOLUME" "$ROOTFS/tmp"
mount -o remount,bind,ro "$ROOTFS"
exec chroot --userspec=65532:65532 --groups= "$ROOTFS" "$@"`
	unshare := append([]string{"--mount", "--fork", "--kill-child", "sh", "-c", script, "sh", img.config.Config.Entrypoint[0]}, args...)
	logPath := filepath.Join(dir, "manager.log")
	proc, err := controlplane.StartProcess("manager", logPath, []string{"ROOTFS=" + rootfs, "VOLUME=" + volume}, "unshare", unshare...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = proc.Stop(30 * time.Second)
		// The manager outlives unshare: chroot's change of user clears the
		// parent-death signal that --kill-child set. It is in unshare's
		// process group (StartProcess makes one), and goes with it.
		_ = syscall.Kill(-proc.Pid(), syscall.SIGKILL)
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("operator log:\n%s", log)
		}
	})
	waitReady(t, proc, probe)

	pid := managerPid(t, proc.Pid())
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"Uid", "Gid"} {
		want := fmt.Sprintf("%s:\t%d\t%d\t%d\t%d", field, nonroot, nonroot, nonroot, nonroot)
		if !slices.Contains(strings.Split(string(status), "\n"), want) {
			t.Errorf("the operator does not run as %d (want %q):\n%s", nonroot, want, status)
		}
	}
	if !rootReadOnly(t, pid) {
		t.Error("the operator's root filesystem is writable")
	}

	c, err := client.New(cluster.Config, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "image"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	job := seedJob(t, root)
	job.Namespace = ns.Name
	if err := c.Create(ctx, job); err != nil {
		t.Fatalf("creating the seed example (the operator's webhook judges it): %v", err)
	}
	var got ibjv1.IndexedBatchJob
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			t.Fatal(err)
		}
		if harness.ConditionReason(&got, ibjv1.ConditionFailed) != "" {
			break
		}
		if exited, err := proc.Exited(); exited {
			t.Fatalf("the operator exited: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the seed example did not fail within 2 minutes; status: %+v", got.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	type outcome struct {
		Reason, CompletedIndexes, FailedIndexes string
		Succeeded, Failed, Active               int32
	}
	want := outcome{Reason: ibjv1.ReasonFailedIndexes, CompletedIndexes: "0,3-7", FailedIndexes: "1,2", Succeeded: 6, Failed: 4}
	gotOutcome := outcome{
		Reason:           harness.ConditionReason(&got, ibjv1.ConditionFailed),
		CompletedIndexes: got.Status.CompletedIndexes,
		FailedIndexes:    ptr.Deref(got.Status.FailedIndexes, ""),
		Succeeded:        got.Status.Succeeded,
		Failed:           got.Status.Failed,
		Active:           got.Status.Active,
	}
	if diff := cmp.Diff(want, gotOutcome); diff != "" {
		t.Errorf("the seed example's final status (-want +got):\n%s", diff)
	}
}

// waitReady waits until the operator's readiness probe answers 200.
func waitReady(t *testing.T, proc *controlplane.Process, probe int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if exited, err := proc.Exited(); exited {
			t.Fatalf("the operator exited before it was ready: %v", err)
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator was not ready within a minute (last: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// managerPid is the process unshare forked (sh, then chroot, then the
// entrypoint, each exec'ing the next).
func managerPid(t *testing.T, unsharePid int) int {
	t.Helper()
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unsharePid, unsharePid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(children))
	if len(fields) != 1 {
		t.Fatalf("unshare has children %q, want one", fields)
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(exe) != "manager" {
		t.Fatalf("unshare's child runs %s, want the image's /manager", exe)
	}
	return pid
}

// rootReadOnly reports whether the process's / is mounted read-only, from its
// mountinfo (mount point in field 5, per-mount options in field 6).
func rootReadOnly(t *testing.T, pid int) bool {
	t.Helper()
	info, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 5 && fields[4] == "/" {
			return slices.Contains(strings.Split(fields[5], ","), "ro")
		}
	}
	t.Fatalf("no / in the operator's mountinfo:\n%s", info)
	return false
}

// seedJob reads the seed example from config/samples.
func seedJob(t *testing.T, root string) *ibjv1.IndexedBatchJob {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "config", "samples", "batch_v1alpha1_indexedbatchjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	job := &ibjv1.IndexedBatchJob{}
	if err := yaml.UnmarshalStrict(data, job); err != nil {
		t.Fatal(err)
	}
	return job
}

func scheme(t *testing.T) *k8sruntime.Scheme {
	t.Helper()
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := ibjv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// testWriter sends the cluster's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// expectStaticBinary checks that the image holds name as a static,
// stripped ELF binary for arch that nonroot may run and not change.
func expectStaticBinary(t *testing.T, files map[string]File, name, arch string) {
	t.Helper()
	f, ok := imageFile(t, files, name)
	if !ok {
		return
	}
	if f.Header.Mode&0o755 != 0o755 || f.Header.Uid != 0 {
		t.Errorf("%s: mode %o owner %d, want 755 owned by root (nonroot may run it, not change it)", name, f.Header.Mode, f.Header.Uid)
	}
	bin, err := elf.NewFile(strings.NewReader(string(f.Data)))
	if err != nil {
		t.Errorf("%s is not an ELF binary: %v", name, err)
		return
	}
	if bin.Machine != elfMachine[arch] {
		t.Errorf("%s is built for %v, want %v", name, bin.Machine, elfMachine[arch])
	}
	for _, prog := range bin.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (%v); the image has no libc", name, prog.Type)
		}
	}
	for _, section := range []string{".symtab", ".debug_info"} {
		if bin.Section(section) != nil {
			t.Errorf("%s has a %s section: not stripped (-ldflags=-s -w)", name, section)
		}
	}
}

// expectLinksKueue checks that the binary name links Kueue at version
// (its build information, which -ldflags='-s -w' keeps, lists the
// modules): the one binary starts the Kueue integration in process, with
// nothing else to run.
func expectLinksKueue(t *testing.T, files map[string]File, name, version string) {
	t.Helper()
	f, ok := files[name]
	if !ok {
		return // expectStaticBinary says so
	}
	info, err := buildinfo.Read(bytes.NewReader(f.Data))
	if err != nil {
		t.Errorf("%s has no Go build information: %v", name, err)
		return
	}
	for _, dep := range info.Deps {
		if dep.Path == "sigs.k8s.io/kueue" {
			if dep.Version != version {
				t.Errorf("%s links sigs.k8s.io/kueue %s, go.mod requires %s", name, dep.Version, version)
			}
			return
		}
	}
	t.Errorf("%s does not link sigs.k8s.io/kueue: built without the Kueue integration", name)
}

// requiredVersion is the version of module path that go.mod requires.
func requiredVersion(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", path).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}
