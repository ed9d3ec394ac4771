package metricsauth

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// The suite runs against a real kube-apiserver (envtest), which reviews
// ServiceAccount tokens and authorizes with RBAC as a cluster does.
var (
	adminCfg  *rest.Config // system:masters
	k8sClient client.Client
)

const namespace = "default"

// The ServiceAccounts of the suite: "prometheus" may GET /metrics, "stranger"
// may do nothing.
const (
	readerSA   = "prometheus"
	strangerSA = "stranger"
)

// Without KUBEBUILDER_ASSETS the tests against the fake API server still
// run; the others skip.
func TestMain(m *testing.M) {
	os.Exit(harness.RunWithAPIServer(m, &envtest.Environment{}, func(cfg *rest.Config) error {
		adminCfg = cfg
		if err := setUpRBAC(); err != nil {
			return fmt.Errorf("setting up RBAC: %w", err)
		}
		return nil
	}))
}

// setUpRBAC creates the two ServiceAccounts and grants the reader what
// config/rbac's metrics-reader ClusterRole grants, then waits until the API
// server's authorizer has seen the binding.
func setUpRBAC() error {
	ctx := context.Background()
	var err error
	if k8sClient, err = client.New(adminCfg, client.Options{Scheme: scheme.Scheme}); err != nil {
		return err
	}
	for _, name := range []string{readerSA, strangerSA} {
		if err := k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}); err != nil {
			return err
		}
	}
	if err := k8sClient.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}); err != nil {
		return err
	}
	if err := k8sClient.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: readerSA}},
	}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  "system:serviceaccount:" + namespace + ":" + readerSA,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}
		if err := k8sClient.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
}

// token issues a new token for the ServiceAccount (a TokenRequest, as
// kubelet does for a pod).
func token(t *testing.T, serviceAccount string) string {
	t.Helper()
	harness.SkipWithoutAPIServer(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serviceAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := k8sClient.SubResource("token").Create(context.Background(), sa, tr); err != nil {
		t.Fatalf("requesting a token for %s: %v", serviceAccount, err)
	}
	return tr.Status.Token
}

// serviceAccountConfig is a REST config that authenticates as the
// ServiceAccount and nothing else.
func serviceAccountConfig(t *testing.T, serviceAccount string) *rest.Config {
	harness.SkipWithoutAPIServer(t)
	return &rest.Config{Host: adminCfg.Host, BearerToken: token(t, serviceAccount),
		TLSClientConfig: rest.TLSClientConfig{CAData: adminCfg.CAData}}
}

// reviewCounter counts the reviews the filter sends, by resource.
type reviewCounter struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent map[string]int
}

func (c *reviewCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.sent[req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]]++
	c.mu.Unlock()
	return c.next.RoundTrip(req)
}

// reviews returns how many TokenReviews and SubjectAccessReviews were sent.
func (c *reviewCounter) reviews() (tokenReviews, accessReviews int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent["tokenreviews"], c.sent["subjectaccessreviews"]
}

// guarded is a filter around a handler that records that it ran.
type guarded struct {
	t       *testing.T
	handler http.Handler
	filter  *filter
	api     *reviewCounter
	clock   *clocktesting.FakeClock
	ran     atomic.Int32
	// authorization is the Authorization header the wrapped handler saw.
	authorization atomic.Value
}

// newGuarded builds the filter as the manager does, from a REST config and
// an HTTP client made from it, with a fake clock for the caches.
func newGuarded(t *testing.T, cfg *rest.Config, o options) *guarded {
	t.Helper()
	if cfg == nil {
		harness.SkipWithoutAPIServer(t)
	}
	shared, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A copy: for a plain-HTTP config the shared client is http.DefaultClient.
	httpClient := *shared
	next := httpClient.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	g := &guarded{t: t, api: &reviewCounter{next: next, sent: map[string]int{}},
		clock: clocktesting.NewFakeClock(time.Now())}
	httpClient.Transport = g.api
	o.clock = g.clock
	if g.filter, err = newFilter(cfg, &httpClient, o); err != nil {
		t.Fatal(err)
	}
	g.handler, err = g.filter.wrap(testr.NewWithOptions(t, testr.Options{Verbosity: 4}), http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		g.ran.Add(1)
		g.authorization.Store(req.Header.Get("Authorization"))
		_, _ = w.Write([]byte("metrics"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// do sends method path with the Authorization header (none if empty) and
// returns the response code.
func (g *guarded) do(method, path, authorization string) int {
	req := httptest.NewRequest(method, path, nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	g.handler.ServeHTTP(rec, req)
	return rec.Code
}

// get GETs /metrics with the bearer token.
func (g *guarded) get(token string) int {
	return g.do(http.MethodGet, "/metrics", "Bearer "+token)
}

// expect checks the response code and the reviews sent so far.
func (g *guarded) expect(code, want, tokenReviews, accessReviews int) {
	g.t.Helper()
	if code != want {
		g.t.Errorf("got HTTP %d, want %d", code, want)
	}
	if tr, sar := g.api.reviews(); tr != tokenReviews || sar != accessReviews {
		g.t.Errorf("sent %d TokenReviews and %d SubjectAccessReviews, want %d and %d", tr, sar, tokenReviews, accessReviews)
	}
}

func TestRequestWithoutBearerTokenIsUnauthorizedWithoutAskingTheAPIServer(t *testing.T) {
	g := newGuarded(t, adminCfg, defaultOptions())
	for _, header := range []string{"", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Bearer  two-spaces", "token abc"} {
		g.expect(g.do(http.MethodGet, "/metrics", header), http.StatusUnauthorized, 0, 0)
	}
	if g.ran.Load() != 0 {
		t.Error("the metrics handler ran without a token")
	}
}

// A token the API server rejects with an error (unknown, expired) is not
// kept with the accepted ones, as upstream, but refused without asking
// again for rejectTTL: a scraper stuck on a bad token costs a review every
// 10 s, not one a scrape.
func TestUnknownTokenIsRefusedWithoutAReviewForTenSeconds(t *testing.T) {
	g := newGuarded(t, adminCfg, defaultOptions())
	g.expect(g.get("not-a-token"), http.StatusUnauthorized, 1, 0)
	g.expect(g.get("not-a-token"), http.StatusUnauthorized, 1, 0)
	g.clock.Step(rejectTTL + time.Second)
	g.expect(g.get("not-a-token"), http.StatusUnauthorized, 2, 0)
	if g.ran.Load() != 0 {
		t.Error("the metrics handler ran for an unknown token")
	}
	if keys := g.filter.authn.cache.Keys(); len(keys) != 0 {
		t.Errorf("the accepted tokens' cache holds %d entries, want none", len(keys))
	}
}

func TestTokenWithoutRBACIsForbiddenAndTheDenialCachedFor30s(t *testing.T) {
	g := newGuarded(t, adminCfg, defaultOptions())
	stranger := token(t, strangerSA)
	g.expect(g.get(stranger), http.StatusForbidden, 1, 1)
	g.clock.Step(29 * time.Second)
	g.expect(g.get(stranger), http.StatusForbidden, 1, 1)
	g.clock.Step(2 * time.Second) // 31s: the denial expired, the token has not
	g.expect(g.get(stranger), http.StatusForbidden, 1, 2)
	g.clock.Step(31 * time.Second) // 62s: both expired
	g.expect(g.get(stranger), http.StatusForbidden, 2, 3)
	if g.ran.Load() != 0 {
		t.Error("the metrics handler ran for a token without RBAC")
	}
}

func TestTokenWithRBACReachesTheHandlerAndIsCached(t *testing.T) {
	g := newGuarded(t, adminCfg, defaultOptions())
	reader := "Bearer " + token(t, readerSA)
	// The ClusterRole grants verb "get": a review with "GET" would be denied.
	g.expect(g.do(http.MethodGet, "/metrics", reader), http.StatusOK, 1, 1)
	if g.ran.Load() != 1 {
		t.Fatalf("the metrics handler ran %d times, want 1", g.ran.Load())
	}
	if got := g.authorization.Load(); got != "" {
		t.Errorf("the handler saw Authorization %q; the token should have been removed", got)
	}

	g.clock.Step(59 * time.Second)
	g.expect(g.do(http.MethodGet, "/metrics", reader), http.StatusOK, 1, 1)
	g.clock.Step(2 * time.Second) // 61s: the token is reviewed again, the allowance holds 5 min
	g.expect(g.do(http.MethodGet, "/metrics", reader), http.StatusOK, 2, 1)
	g.clock.Step(2*time.Minute + 59*time.Second) // 4m
	g.expect(g.do(http.MethodGet, "/metrics", reader), http.StatusOK, 3, 1)
	g.clock.Step(61 * time.Second) // 5m01s: both expired
	g.expect(g.do(http.MethodGet, "/metrics", reader), http.StatusOK, 4, 2)
	if g.ran.Load() != 5 {
		t.Errorf("the metrics handler ran %d times, want 5", g.ran.Load())
	}

	// Path and verb are the request's: neither other path nor POST is granted.
	g.expect(g.do(http.MethodGet, "/debug", reader), http.StatusForbidden, 4, 3)
	g.expect(g.do(http.MethodPost, "/metrics", reader), http.StatusForbidden, 4, 4)
	if g.ran.Load() != 5 {
		t.Errorf("the metrics handler ran %d times, want 5", g.ran.Load())
	}
}

func TestManagerNotAllowedToReviewIsInternalServerError(t *testing.T) {
	// The filter asks as "stranger", which may not create TokenReviews:
	// Forbidden is not retried.
	g := newGuarded(t, serviceAccountConfig(t, strangerSA), defaultOptions())
	g.expect(g.get(token(t, readerSA)), http.StatusInternalServerError, 1, 0)
	g.expect(g.get(token(t, readerSA)), http.StatusInternalServerError, 2, 0)
	if g.ran.Load() != 0 {
		t.Error("the metrics handler ran although nothing could be checked")
	}
}

func TestTokenCacheIsBounded(t *testing.T) {
	o := defaultOptions()
	o.cacheSize = 2
	g := newGuarded(t, adminCfg, o)
	// Each token of a ServiceAccount carries its own credential ID in the
	// user's extra, so each also needs an access review of its own (which
	// that cache, bounded the same, evicts alike).
	a, b, c := token(t, readerSA), token(t, readerSA), token(t, readerSA)
	g.expect(g.get(a), http.StatusOK, 1, 1)
	g.expect(g.get(b), http.StatusOK, 2, 2)
	g.expect(g.get(c), http.StatusOK, 3, 3) // evicts a
	g.expect(g.get(c), http.StatusOK, 3, 3)
	g.expect(g.get(a), http.StatusOK, 4, 4) // a was evicted: reviewed again; evicts b

	// A flood of random tokens is answered without a trace in the cache:
	// a and c stay cached.
	for i := range 50 {
		g.expect(g.get(fmt.Sprintf("random-%d", i)), http.StatusUnauthorized, 5+i, 4)
	}
	if n := len(g.filter.authn.cache.Keys()); n != 2 {
		t.Errorf("token cache holds %d entries, want the bound, 2", n)
	}
	g.expect(g.get(a), http.StatusOK, 54, 4)
	g.expect(g.get(c), http.StatusOK, 54, 4)
}

func TestAccessReviewCacheIsBounded(t *testing.T) {
	o := defaultOptions()
	o.cacheSize = 2
	g := newGuarded(t, adminCfg, o)
	reader := "Bearer " + token(t, readerSA)
	g.expect(g.do(http.MethodGet, "/metrics", reader), http.StatusOK, 1, 1)
	g.expect(g.do(http.MethodGet, "/a", reader), http.StatusForbidden, 1, 2)
	g.expect(g.do(http.MethodGet, "/b", reader), http.StatusForbidden, 1, 3) // evicts /metrics
	g.expect(g.do(http.MethodGet, "/b", reader), http.StatusForbidden, 1, 3)
	g.expect(g.do(http.MethodGet, "/metrics", reader), http.StatusOK, 1, 4)
	for i := range 20 {
		g.do(http.MethodGet, fmt.Sprintf("/flood/%d", i), reader)
	}
	if n := len(g.filter.authz.cache.Keys()); n != 2 {
		t.Errorf("access review cache holds %d entries, want the bound, 2", n)
	}
}
