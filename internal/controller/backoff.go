package controller

import "github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"

// Backoff is the delay before a failed pod is replaced (jobpod.Backoff, which
// the kubectl plugin reads too, so that both tell the same wait).
type Backoff = jobpod.Backoff
