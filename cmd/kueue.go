package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueueapi"
	ibjwebhook "github.com/indexed-batch-job/indexed-batch-job/internal/webhook"
)

// kueueFlags are the flags of the Kueue integration.
type kueueFlags struct {
	mode string
	// manageJobsWithoutQueueName and managedJobsNamespaceSelector repeat
	// the fields of the same names of Kueue's Configuration.
	manageJobsWithoutQueueName   bool
	managedJobsNamespaceSelector string
}

func (f *kueueFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "kueue", kueueapi.ModeAuto,
		"The Kueue integration: auto starts it in this process once Kueue's API (kueue.x-k8s.io/v1beta2 Workload) "+
			"is served, checked at start and watched for after; enabled also suspends jobs labelled "+
			"kueue.x-k8s.io/queue-name before then; disabled never runs it.")
	fs.BoolVar(&f.manageJobsWithoutQueueName, "kueue-manage-jobs-without-queue-name", false,
		"Set it to what your Kueue Configuration's manageJobsWithoutQueueName says: true queues IndexedBatchJobs "+
			"without the kueue.x-k8s.io/queue-name label too (created suspended, with a Workload), in the namespaces "+
			"--kueue-managed-jobs-namespace-selector selects.")
	fs.StringVar(&f.managedJobsNamespaceSelector, "kueue-managed-jobs-namespace-selector",
		ibjkueue.DefaultManagedJobsNamespaceSelector,
		"Set it to what your Kueue Configuration's managedJobsNamespaceSelector says, as a label selector string "+
			"(matchLabels a: b is \"a=b\", a NotIn expression \"key notin (x,y)\", joined by commas; empty selects every "+
			"namespace): Kueue manages no IndexedBatchJob in a namespace it does not select, with or without a queue "+
			"name. The default is Kueue's, for a Kueue in kueue-system.")
}

// settings are the flags' Kueue settings, or an error that names the flag.
func (f kueueFlags) settings() (ibjkueue.Settings, error) {
	s, err := ibjkueue.ParseSettings(f.manageJobsWithoutQueueName, f.managedJobsNamespaceSelector)
	if err != nil {
		return ibjkueue.Settings{}, fmt.Errorf("--kueue-managed-jobs-namespace-selector: %w", err)
	}
	return s, nil
}

// setupKueue starts the Kueue integration with f inside mgr
// (ibjkueue.Setup: once Kueue's API is served, at start or later, without
// restarting anything) and returns the webhooks' queue steps, nil
// when the mode is disabled. It fails only on a bad flag: a failure of the
// integration itself is logged, recorded as an event about the operator's
// Pod (POD_NAME and POD_NAMESPACE, from the downward API) and reported by
// the indexedbatchjob_kueue_integration gauge, and the rest runs on.
func setupKueue(mgr ctrl.Manager, f kueueFlags) (*queueSteps, error) {
	settings, err := f.settings()
	if err != nil {
		return nil, err
	}
	kq, err := ibjkueue.Setup(mgr, ibjkueue.Options{
		Mode:         f.mode,
		PodName:      os.Getenv("POD_NAME"),
		PodNamespace: os.Getenv("POD_NAMESPACE"),
		Settings:     settings,
	})
	if err != nil || kq == nil {
		return nil, err
	}
	return &queueSteps{
		defaulting: kq.Defaulter,
		validation: func(c client.Client) ibjwebhook.QueueValidation { return kq.Validator(c) },
	}, nil
}
