package kubectlibj

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

const rerunExample = `  # Rerun the indexes of per-index that failed, as job per-index-rerun-1 (or -2, …)
  kubectl ibj rerun per-index --failed

  # Rerun indexes 3 and 5 to 7 as job fix-3
  kubectl ibj rerun per-index --index 3,5-7 --name fix-3

  # Print the job it would create, or have the API server check it
  kubectl ibj rerun per-index --failed --dry-run -o yaml
  kubectl ibj rerun per-index --failed --dry-run=server`

// Values of --dry-run, as kubectl's.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

// rerunOptions is `kubectl ibj rerun JOB`.
type rerunOptions struct {
	*common
	printFlags *genericclioptions.PrintFlags

	name    string
	failed  bool
	index   string
	newName string
	dryRun  string
}

func newRerunCommand(c *common) *cobra.Command {
	o := &rerunOptions{common: c, printFlags: genericclioptions.NewPrintFlags("created").WithTypeSetter(scheme), dryRun: dryRunNone}
	cmd := &cobra.Command{
		Use:   "rerun JOB (--failed | --index LIST) [--name NAME] [--dry-run[=client|server]]",
		Short: "Create a new job from JOB's spec that runs only the chosen indexes",
		Long: `Create a new IndexedBatchJob with the spec of JOB and spec.indexes set to the
indexes to rerun: --failed for those that failed (status.failedIndexes and,
once the job has failed, every index that did not succeed), or --index for a
list of your own. Each index keeps its number. The new job is named
JOB-rerun-N, N the first free number, unless --name says otherwise, and
carries the label ` + RerunOfLabel + `=JOB. JOB's labels and
annotations are copied; its status, uid, resourceVersion, owner references
and other server-set fields are not.`,
		Example: rerunExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			if err := o.validate(); err != nil {
				return err
			}
			if err := o.complete(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.failed, "failed", false, "Rerun the indexes that failed.")
	cmd.Flags().StringVar(&o.index, "index", "", "Rerun these indexes, written as status.completedIndexes is (3,5-7).")
	cmd.Flags().StringVar(&o.newName, "name", "", "The new job's name (default JOB-rerun-N).")
	cmd.Flags().StringVar(&o.dryRun, "dry-run", o.dryRun, `"client" prints the job without creating it, "server" has the API server check it without creating it.`)
	cmd.Flag("dry-run").NoOptDefVal = dryRunClient
	o.printFlags.AddFlags(cmd)
	return cmd
}

func (o *rerunOptions) validate() error {
	if o.failed == (o.index != "") {
		return errors.New("say which indexes to rerun: --failed or --index, one of them")
	}
	switch o.dryRun {
	case dryRunNone, dryRunClient, dryRunServer:
	default:
		return fmt.Errorf("--dry-run must be client, server or none, not %q", o.dryRun)
	}
	if o.dryRun != dryRunNone {
		if *o.printFlags.OutputFormat == "" {
			*o.printFlags.OutputFormat = "yaml"
		}
		return o.printFlags.Complete("%s (dry run)")
	}
	return nil
}

func (o *rerunOptions) run(ctx context.Context) error {
	jobs := o.dynamic.Resource(jobsResource).Namespace(o.namespace)
	orig, err := jobs.Get(ctx, o.name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	job := &ibjv1.IndexedBatchJob{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(orig.UnstructuredContent(), job); err != nil {
		return err
	}
	indexes, err := o.indexes(job)
	if err != nil {
		return err
	}
	rerun, err := rerunJob(orig, indexes)
	if err != nil {
		return err
	}
	if sub := job.Spec.Network; sub != nil && sub.Subdomain != nil && ptr.Deref(sub.EnableDNSHostnames, false) {
		fmt.Fprintf(o.ErrOut, "Warning: the rerun asks for the same headless Service %s as %s; while %s's Service exists, the rerun's pods resolve through it\n",
			*sub.Subdomain, job.Name, job.Name)
	}
	printer, err := o.printFlags.ToPrinter()
	if err != nil {
		return err
	}
	for n := 1; ; n++ {
		name := o.newName
		if name == "" {
			if name, n, err = o.freeName(ctx, n); err != nil {
				return err
			}
		}
		rerun.SetName(name)
		if o.dryRun == dryRunClient {
			return printer.PrintObj(rerun, o.Out)
		}
		opts := metav1.CreateOptions{}
		if o.dryRun == dryRunServer {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		created, err := jobs.Create(ctx, rerun, opts)
		if apierrors.IsAlreadyExists(err) && o.newName == "" {
			continue // taken since freeName looked: try the next number
		}
		if err != nil {
			return err
		}
		return printer.PrintObj(created, o.Out)
	}
}

// indexes are the indexes to rerun, from --failed or --index.
func (o *rerunOptions) indexes(job *ibjv1.IndexedBatchJob) (indexset.Set, error) {
	if o.index != "" {
		set, err := indexset.Parse(o.index, job.Spec.Completions)
		if err != nil {
			return indexset.Set{}, fmt.Errorf("--index: %w", err)
		}
		if set.Len() == 0 {
			return indexset.Set{}, errors.New("--index: no index given")
		}
		return set, nil
	}
	set := failedIndexes(job)
	if set.Len() == 0 {
		return indexset.Set{}, fmt.Errorf("job %s has no failed indexes to rerun", job.Name)
	}
	return set, nil
}

// failedIndexes are the indexes --failed reruns: status.failedIndexes and,
// once the job's failure is decided, every index it runs that did not
// succeed (a job without backoffLimitPerIndex has no failedIndexes, and a
// job that failed at once leaves indexes that never finished).
func failedIndexes(job *ibjv1.IndexedBatchJob) indexset.Set {
	failed, _ := indexset.Parse(ptr.Deref(job.Status.FailedIndexes, ""), 0)
	if end, failing := jobEnd(job); end == nil || !failing {
		return failed
	}
	completed, _ := indexset.Parse(job.Status.CompletedIndexes, 0)
	return failed.Union(wantedIndexes(job).Difference(completed))
}

// freeName is <job>-rerun-<n> for the first n from "from" on that no job
// of the namespace has.
func (o *rerunOptions) freeName(ctx context.Context, from int) (string, int, error) {
	jobs := o.dynamic.Resource(jobsResource).Namespace(o.namespace)
	for n := from; ; n++ {
		name := o.name + "-rerun-" + strconv.Itoa(n)
		_, err := jobs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return name, n, nil
		}
		if err != nil {
			return "", 0, err
		}
	}
}

// rerunJob is a new job with orig's spec, running only the given indexes.
// It is built from the job as the API server returned it, unstructured, so
// that spec fields this plugin does not know yet are carried over as they
// are. The name is set by the caller.
func rerunJob(orig *unstructured.Unstructured, indexes indexset.Set) (*unstructured.Unstructured, error) {
	spec, ok, err := unstructured.NestedMap(orig.Object, "spec")
	if err != nil || !ok {
		return nil, fmt.Errorf("job %s has no spec: %v", orig.GetName(), err)
	}
	spec["indexes"] = indexes.String()
	// With peer DNS and no network.subdomain, the headless Service takes the
	// job's name, and the template's subdomain must be unset or equal to it.
	if enabled, _, _ := unstructured.NestedBool(spec, "network", "enableDNSHostnames"); enabled {
		_, named, _ := unstructured.NestedString(spec, "network", "subdomain")
		if sub, _, _ := unstructured.NestedString(spec, "template", "spec", "subdomain"); !named && sub == orig.GetName() {
			unstructured.RemoveNestedField(spec, "template", "spec", "subdomain")
		}
	}
	rerun := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	rerun.SetAPIVersion(orig.GetAPIVersion())
	rerun.SetKind(orig.GetKind())
	rerun.SetNamespace(orig.GetNamespace())
	labels := orig.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[RerunOfLabel] = orig.GetName()
	rerun.SetLabels(labels)
	annotations := orig.GetAnnotations()
	delete(annotations, "kubectl.kubernetes.io/last-applied-configuration")
	if len(annotations) > 0 {
		rerun.SetAnnotations(annotations)
	}
	return rerun, nil
}
