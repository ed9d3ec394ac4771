package metricsauth

import (
	"context"
	"fmt"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// codecs knows only the two review groups (and, through them, meta/v1's
// Status for errors): all this package ever sends or reads.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(authenticationv1.AddToScheme(s))
	utilruntime.Must(authorizationv1.AddToScheme(s))
	return serializer.NewCodecFactory(s)
}()

// restClientFor is a REST client for one API group version, as the typed
// clientset builds it, from a copy of cfg (whose rate limiter, the
// reviews' own, it keeps).
func restClientFor(cfg *rest.Config, httpClient *http.Client, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientForConfigAndClient(c, httpClient)
}

// create POSTs a review to resource and decodes the answer into out,
// retrying while the error says the API server may answer later.
func create(ctx context.Context, c rest.Interface, backoff wait.Backoff, resource string, in, out runtime.Object) error {
	return withRetry(ctx, backoff, func() error {
		return c.Post().Resource(resource).Body(in).Do(ctx).Into(out)
	})
}

// withRetry is k8s.io/apiserver's webhook.WithExponentialBackoff: the last
// error of fn wins over the backoff's own "gave up" error.
func withRetry(ctx context.Context, backoff wait.Backoff, fn func() error) error {
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		lastErr = fn()
		if shouldRetry(lastErr) {
			return false, nil
		}
		return lastErr == nil, lastErr
	})
	switch {
	case lastErr != nil:
		return lastErr
	case err != nil:
		return fmt.Errorf("review request failed: %w", err)
	default:
		return nil
	}
}

// shouldRetry is k8s.io/apiserver's webhook.DefaultShouldRetry: errors that
// are transient or that carry an explicit Retry-After.
func shouldRetry(err error) bool {
	if err == nil {
		return false
	}
	if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		apierrors.IsInternalError(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
		return true
	}
	_, retry := apierrors.SuggestsClientDelay(err)
	return retry
}
