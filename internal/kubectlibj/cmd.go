// Package kubectlibj is the kubectl plugin `kubectl ibj` (cmd/kubectl-ibj):
// the per-index view of an IndexedBatchJob (`indexes`), its state in words
// (`describe`), the nodes where its pods failed (`nodes`), and a new job
// that reruns chosen indexes (`rerun`).
//
// It follows kubernetes/sample-cli-plugin: every command is an options
// struct with Complete, Validate and Run, built on cli-runtime's
// ConfigFlags, so that every kubectl connection flag (--kubeconfig,
// --context, -n, --as, …) works, and on its printers for -o. It reads the
// API server only: the job, its pods (in pages, by label), the events about
// the job, and the job's failure record (the ConfigMaps the operator
// writes, internal/failrecord). Where the
// operator's decisions are needed (how a failed pod counts, which
// podFailurePolicy rule matches it, the backoff), they are evaluated here
// again, as the operator and upstream's Job controller make them.
package kubectlibj

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"
	"k8s.io/utils/clock"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// RerunOfLabel is set by `kubectl ibj rerun` on the job it creates, to the
// name of the job whose indexes it reruns.
const RerunOfLabel = "batch.indexedjob.dev/rerun-of"

// jobsResource is the IndexedBatchJob resource.
var jobsResource = ibjv1.GroupVersion.WithResource("indexedbatchjobs")

// jobKind is the IndexedBatchJob kind.
var jobKind = ibjv1.GroupVersion.WithKind("IndexedBatchJob")

// scheme knows the IndexedBatchJob, for the printers' type setter.
var scheme = runtime.NewScheme()

func init() {
	if err := ibjv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	scheme.AddKnownTypeWithName(ReportGroupVersion.WithKind("IndexReport"), &IndexReport{})
}

// common is what every command shares: the connection flags, the streams,
// the clock, and the clients made from them in Complete.
type common struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	clock clock.PassiveClock

	namespace string
	// chunkSize is the page size of pod and event lists (and caps that of
	// the failure record's, recordPage).
	chunkSize int64
	// backoff is the operator's cluster-wide retry backoff.
	backoff jobpod.Backoff

	kube    kubernetes.Interface
	dynamic dynamic.Interface
}

// NewCommand is `kubectl ibj`. The clock is what "now" is for retry times,
// ages and durations (tests inject a fixed one).
func NewCommand(streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	c := &common{
		configFlags: genericclioptions.NewConfigFlags(true),
		IOStreams:   streams,
		clock:       clk,
		chunkSize:   500,
		backoff:     jobpod.DefaultBackoff,
	}
	root := &cobra.Command{
		Use:   "kubectl-ibj",
		Short: "See every index of an IndexedBatchJob, and rerun the failed ones",
		Long: `kubectl ibj shows an IndexedBatchJob index by index (what state each index is in,
how often it ran, why it failed, when it retries), describes the job in words,
shows the nodes where its pods failed, and creates a new job that reruns
chosen indexes of an earlier one.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ibj"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	c.configFlags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().Int64Var(&c.chunkSize, "chunk-size", c.chunkSize, "Return large lists in chunks rather than all at once, as kubectl get does.")
	root.PersistentFlags().DurationVar(&c.backoff.Base, "pod-failure-backoff", c.backoff.Base,
		"The operator's --pod-failure-backoff, if it was changed: the first retry delay of jobs without spec.retryBackoff.")
	root.PersistentFlags().DurationVar(&c.backoff.Max, "pod-failure-backoff-max", c.backoff.Max,
		"The operator's --pod-failure-backoff-max, if it was changed: the longest retry delay of jobs without spec.retryBackoff.")
	root.AddCommand(newIndexesCommand(c), newDescribeCommand(c), newNodesCommand(c), newRerunCommand(c))
	return root
}

// complete makes the clients from the connection flags.
func (c *common) complete() error {
	var err error
	if c.namespace, _, err = c.configFlags.ToRawKubeConfigLoader().Namespace(); err != nil {
		return err
	}
	cfg, err := c.configFlags.ToRESTConfig()
	if err != nil {
		return err
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	// Pods are read in protobuf, a fraction of JSON's decoding time.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.kube, err = kubernetes.NewForConfig(cfg)
	return err
}

// now is the moment the commands describe.
func (c *common) now() time.Time { return c.clock.Now() }

// getJob reads the job, typed.
func (c *common) getJob(ctx context.Context, namespace, name string) (*ibjv1.IndexedBatchJob, error) {
	u, err := c.dynamic.Resource(jobsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	job := &ibjv1.IndexedBatchJob{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), job); err != nil {
		return nil, err
	}
	return job, nil
}

// newPager pages through a list of at most chunkSize items a request,
// fetching the next page while the current one is read, never more.
func (c *common) newPager(list pager.ListPageFunc) *pager.ListPager {
	p := pager.New(list)
	p.PageSize = c.chunkSize
	p.PageBufferSize = 1
	return p
}
