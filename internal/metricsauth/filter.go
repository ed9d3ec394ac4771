// Package metricsauth guards the metrics endpoint the way controller-runtime's
// filters.WithAuthenticationAndAuthorization does: the caller's bearer token
// is checked with a TokenReview and the request with a SubjectAccessReview,
// both answered by the API server and both cached for a while.
//
// It is kept instead of that filter for a measured reason: the filter is
// built on k8s.io/apiserver's delegating authenticator and authorizer, which
// link cel-go, gRPC and OpenTelemetry into the manager, and the larger
// binary's mapped pages raise the manager's resident memory, idle and under
// load, enough that on small jobs the operator would miss its memory target
// against the built-in Job controller. This package needs only the
// authentication/v1 and authorization/v1 types and a REST client. The
// measurements and the decision are in docs/bench/library-choices.md;
// measure again before switching.
package metricsauth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The settings of controller-runtime's filter (and of the apiserver's
// delegating authenticator and authorizer it configures).
const (
	// tokenTTL is how long a TokenReview's answer is trusted.
	tokenTTL = time.Minute
	// allowTTL and denyTTL are how long a SubjectAccessReview's answer is
	// trusted: a granted permission is rarely revoked, a missing one is often
	// about to be granted.
	allowTTL = 5 * time.Minute
	denyTTL  = 30 * time.Second
	// tokenReviewTimeout bounds one token check, retries included.
	tokenReviewTimeout = 10 * time.Second
	// rejectTTL is how long a token the API server rejected with an error
	// (malformed, unknown, expired) is refused without asking again: a
	// scraper stuck on an expired token costs a review every 10 s, not one
	// a scrape. A separate cache holds these, so a flood of distinct bad
	// tokens evicts none of the accepted ones.
	rejectTTL = 10 * time.Second
)

// The reviews' own lane to the API server: a rate limiter of their own (so
// that neither a flood of scrapes takes the budget of the operator's pod
// writes, nor those writes hold back a scrape), and a bound on the reviews
// in flight, past which a request is answered 429 at once instead of
// waiting: what an unauthenticated caller can queue is bounded.
const (
	reviewQPS          = 10
	reviewBurst        = 20
	maxReviewsInFlight = 4
	busyRetryAfterSecs = "1"
)

// cacheSize bounds each of the two caches. Upstream's authorizer keeps 8192
// answers and its token cache has no bound at all; a metrics endpoint has a
// handful of legitimate callers, so 1024 leaves ample room while a flood of
// distinct identities can hold only a few hundred kilobytes.
const cacheSize = 1024

// retryBackoff is upstream's DefaultAuthWebhookRetryBackoff: five tries over
// about four seconds, for errors that say the API server may answer later.
var retryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// options are the knobs the tests turn; production uses defaultOptions.
type options struct {
	tokenTTL, allowTTL, denyTTL time.Duration
	tokenReviewTimeout          time.Duration
	rejectTTL                   time.Duration
	cacheSize                   int
	maxReviewsInFlight          int
	backoff                     wait.Backoff
	clock                       clock.PassiveClock
	// lane bounds the reviews in flight (set by newFilter).
	lane chan struct{}
}

func defaultOptions() options {
	return options{
		tokenTTL:           tokenTTL,
		allowTTL:           allowTTL,
		denyTTL:            denyTTL,
		tokenReviewTimeout: tokenReviewTimeout,
		rejectTTL:          rejectTTL,
		cacheSize:          cacheSize,
		maxReviewsInFlight: maxReviewsInFlight,
		backoff:            retryBackoff,
		clock:              clock.RealClock{},
	}
}

// WithAuthenticationAndAuthorization is a metricsserver.Options.FilterProvider.
// It admits a request only with an `Authorization: Bearer` token that a
// TokenReview accepts (else 401) and whose user a SubjectAccessReview allows
// the request's verb on its path (else 403); failing to ask the API server is
// logged and answered 500. The reviews are sent with the manager's REST
// config and HTTP client, so they share its connections, but on a rate
// limiter of their own, at most maxReviewsInFlight at once: a request that
// would need a review beyond that is answered 429 with Retry-After.
//
// It answers as controller-runtime's filter does, with one exception: a
// token the API server rejects gets 401, where controller-runtime answers
// 500 (the API server's rejection carries an error, which the delegating
// authenticator passes on as a failure to authenticate). Tokens in a
// WebSocket subprotocol header, which the delegating authenticator also
// reads, are not: no metrics scraper sends one.
//
// The manager's ServiceAccount needs to create tokenreviews and
// subjectaccessreviews; callers need, for example, `get` on the
// nonResourceURL /metrics.
func WithAuthenticationAndAuthorization(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	f, err := newFilter(cfg, httpClient, defaultOptions())
	if err != nil {
		return nil, err
	}
	return f.wrap, nil
}

// filter holds the two reviewers and their caches.
type filter struct {
	authn *authenticator
	authz *authorizer
}

func newFilter(cfg *rest.Config, httpClient *http.Client, o options) (*filter, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(reviewQPS, reviewBurst)
	lane := make(chan struct{}, o.maxReviewsInFlight)
	o.lane = lane
	authn, err := newAuthenticator(cfg, httpClient, o)
	if err != nil {
		return nil, fmt.Errorf("failed to create authenticator: %w", err)
	}
	authz, err := newAuthorizer(cfg, httpClient, o)
	if err != nil {
		return nil, fmt.Errorf("failed to create authorizer: %w", err)
	}
	return &filter{authn: authn, authz: authz}, nil
}

// wrap is the metricsserver.Filter: handler runs only for a request that
// passed both reviews. The responses and log lines are controller-runtime's.
func (f *filter) wrap(log logr.Logger, handler http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, err := f.authn.authenticate(req)
		if errors.Is(err, errBusy) {
			busy(w)
			return
		}
		if err != nil {
			log.Error(err, "Authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			log.V(4).Info("Authentication failed")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}

		// The verb of a non-resource request, as the API server derives it.
		verb := strings.ToLower(req.Method)
		allowed, reason, err := f.authz.authorize(req.Context(), user, req.URL.Path, verb)
		if errors.Is(err, errBusy) {
			busy(w)
			return
		}
		if err != nil {
			msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
			log.Error(err, msg)
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		if !allowed {
			msg := fmt.Sprintf("Authorization denied for user %s", user.Username)
			log.V(4).Info(msg, "reason", reason)
			http.Error(w, msg, http.StatusForbidden)
			return
		}

		handler.ServeHTTP(w, req)
	}), nil
}

// errBusy is the error of a review that found maxReviewsInFlight reviews in
// flight.
var errBusy = errors.New("too many reviews in flight")

// busy answers a request that found the review lane full.
func busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", busyRetryAfterSecs)
	http.Error(w, "Too many requests being authenticated; retry later", http.StatusTooManyRequests)
}

// enter takes a place in the review lane, or reports errBusy when every
// place is taken; the caller calls the returned func when its review ends.
func enter(lane chan struct{}) (leave func(), err error) {
	select {
	case lane <- struct{}{}:
		return func() { <-lane }, nil
	default:
		return nil, errBusy
	}
}
