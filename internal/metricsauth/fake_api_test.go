package metricsauth

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// The answers no healthy kube-apiserver gives on cue, from an httptest
// server playing the two review APIs.

// fakeAPI answers TokenReviews with tokenStatus (or fails with
// tokenReviewCode) and SubjectAccessReviews with accessStatus, and keeps the
// access reviews it was sent.
type fakeAPI struct {
	tokenStatus     authenticationv1.TokenReviewStatus
	tokenReviewCode int
	// tokenStatusFor, if set, answers for each token instead of
	// tokenStatus; held, if set, holds every TokenReview until it closes.
	tokenStatusFor func(token string) authenticationv1.TokenReviewStatus
	held           chan struct{}
	accessStatus   authorizationv1.SubjectAccessReviewStatus

	mu            sync.Mutex
	accessReviews []authorizationv1.SubjectAccessReviewSpec
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch req.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		if f.tokenReviewCode != 0 {
			w.WriteHeader(f.tokenReviewCode)
			_ = json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure, Message: "down", Code: int32(f.tokenReviewCode),
			})
			return
		}
		if f.held != nil {
			<-f.held
		}
		status := f.tokenStatus
		if f.tokenStatusFor != nil {
			var tr authenticationv1.TokenReview
			_ = json.NewDecoder(req.Body).Decode(&tr)
			status = f.tokenStatusFor(tr.Spec.Token)
		}
		_ = json.NewEncoder(w).Encode(authenticationv1.TokenReview{Status: status})
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		var sar authorizationv1.SubjectAccessReview
		_ = json.NewDecoder(req.Body).Decode(&sar)
		f.mu.Lock()
		f.accessReviews = append(f.accessReviews, sar.Spec)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(authorizationv1.SubjectAccessReview{Status: f.accessStatus})
	default:
		http.NotFound(w, req)
	}
}

// newFakeGuarded is newGuarded against the fake API, retrying fast.
func newFakeGuarded(t *testing.T, api *fakeAPI) *guarded {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	o := defaultOptions()
	o.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 1.5, Steps: 5}
	return newGuarded(t, &rest.Config{Host: srv.URL}, o)
}

func TestReviewsCarryTheUserAndTheRequestAsTheAPIServerWouldSeeThem(t *testing.T) {
	api := &fakeAPI{
		tokenStatus: authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
			Username: "alice", UID: "u-1", Groups: []string{"team"},
			Extra: map[string]authenticationv1.ExtraValue{"scopes": {"a", "b"}},
		}},
		accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true},
	}
	g := newFakeGuarded(t, api)
	g.expect(g.do(http.MethodGet, "/metrics", "bEaReR tok"), http.StatusOK, 1, 1)
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "alice", UID: "u-1", Groups: []string{"team", "system:authenticated"},
		Extra:                 map[string]authorizationv1.ExtraValue{"scopes": {"a", "b"}},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}
	if got := api.accessReviews[0]; !jsonEqual(got, want) {
		t.Errorf("SubjectAccessReview spec\n got %+v\nwant %+v", got, want)
	}
}

func TestAuthenticatedGroupIsNotAddedTwiceNorToAnonymous(t *testing.T) {
	for _, user := range []authenticationv1.UserInfo{
		{Username: "bob", Groups: []string{"system:authenticated", "x"}},
		{Username: "carol", Groups: []string{"system:unauthenticated"}},
		{Username: "system:anonymous"},
	} {
		api := &fakeAPI{
			tokenStatus:  authenticationv1.TokenReviewStatus{Authenticated: true, User: user},
			accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true},
		}
		g := newFakeGuarded(t, api)
		g.expect(g.get("tok"), http.StatusOK, 1, 1)
		if got := api.accessReviews[0].Groups; !slices.Equal(got, user.Groups) {
			t.Errorf("%s: groups %v, want %v", user.Username, got, user.Groups)
		}
	}
}

func TestRejectionWithoutErrorIsCachedForAMinute(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{tokenStatus: authenticationv1.TokenReviewStatus{Authenticated: false}})
	g.expect(g.get("tok"), http.StatusUnauthorized, 1, 0)
	g.clock.Step(59 * time.Second)
	g.expect(g.get("tok"), http.StatusUnauthorized, 1, 0)
	g.clock.Step(2 * time.Second)
	g.expect(g.get("tok"), http.StatusUnauthorized, 2, 0)
}

func TestAPIServerFailingIsRetriedThenInternalServerError(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{tokenReviewCode: http.StatusInternalServerError})
	// Five tries (the backoff's steps), then 500; and nothing cached.
	g.expect(g.get("tok"), http.StatusInternalServerError, 5, 0)
	g.expect(g.get("tok"), http.StatusInternalServerError, 10, 0)
	if g.ran.Load() != 0 {
		t.Error("the metrics handler ran although the token was never checked")
	}
}

func TestAPIServerUnreachableIsInternalServerError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	o := defaultOptions()
	o.backoff = wait.Backoff{Duration: time.Millisecond, Steps: 2}
	g := newGuarded(t, &rest.Config{Host: srv.URL}, o)
	g.expect(g.get("tok"), http.StatusInternalServerError, 1, 0) // connection refused is not retried
}

func TestAccessReviewBothAllowedAndDeniedIsInternalServerError(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{
		tokenStatus:  authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "dave"}},
		accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true},
	})
	g.expect(g.get("tok"), http.StatusInternalServerError, 1, 1)
	if g.ran.Load() != 0 {
		t.Error("the metrics handler ran on a contradictory access review")
	}
}

func TestAccessReviewWithNoOpinionIsForbidden(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{
		tokenStatus: authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "erin"}},
	})
	g.expect(g.get("tok"), http.StatusForbidden, 1, 1)
}

func TestTokenCacheKeysAreKeyedHashesNotTokens(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{
		tokenStatus:  authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "frank"}},
		accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true},
	})
	g.expect(g.get("secret-token"), http.StatusOK, 1, 1)
	keys := g.filter.authn.cache.Keys()
	if len(keys) != 1 {
		t.Fatalf("%d keys cached, want 1", len(keys))
	}
	key, ok := keys[0].([32]byte)
	if !ok {
		t.Fatalf("cache key is a %T, want a [32]byte hash", keys[0])
	}
	other, err := newFilter(&rest.Config{Host: "http://unused"}, http.DefaultClient, defaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if other.authn.tokenKey("secret-token") == key {
		t.Error("two processes hash a token alike: the hash key is not random")
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// A flood of distinct bad tokens is kept apart from the accepted ones: the
// scraper whose token was accepted is still served from the cache after it.
func TestBadTokensEvictNoAcceptedOne(t *testing.T) {
	api := &fakeAPI{
		tokenStatusFor: func(token string) authenticationv1.TokenReviewStatus {
			if token == "good" {
				return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "prometheus"}}
			}
			return authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		},
		accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true},
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	o := defaultOptions()
	o.cacheSize = 8
	g := newGuarded(t, &rest.Config{Host: srv.URL}, o)
	g.expect(g.get("good"), http.StatusOK, 1, 1)
	for i := range 3 * o.cacheSize {
		g.expect(g.get(fmt.Sprintf("bad-%d", i)), http.StatusUnauthorized, 2+i, 1)
	}
	g.expect(g.get("good"), http.StatusOK, 1+3*o.cacheSize, 1)
}

// At most maxReviewsInFlight reviews are in flight: a request that would
// need one more is answered 429 with Retry-After at once, so that callers
// with unknown tokens cannot queue up work without bound.
func TestReviewsInFlightAreBounded(t *testing.T) {
	api := &fakeAPI{held: make(chan struct{}), tokenStatus: authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	o := defaultOptions()
	o.maxReviewsInFlight = 2
	g := newGuarded(t, &rest.Config{Host: srv.URL}, o)
	codes := make(chan int, 2)
	for i := range 2 {
		go func() { codes <- g.get(fmt.Sprintf("slow-%d", i)) }()
	}
	// Both places taken: wait until the fake API holds both reviews.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if tr, _ := g.api.reviews(); tr == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the two reviews never reached the API")
		}
		time.Sleep(time.Millisecond)
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer one-more")
	rec := httptest.NewRecorder()
	g.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("the third review: HTTP %d, Retry-After %q; want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(api.held)
	for range 2 {
		if code := <-codes; code != http.StatusUnauthorized {
			t.Errorf("a held review: HTTP %d, want 401", code)
		}
	}
}

// The reviews have a rate limiter of their own: one the manager's config
// carries, however full, holds none of them back.
func TestReviewsDoNotWaitOnTheManagersRateLimiter(t *testing.T) {
	api := &fakeAPI{tokenStatus: authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "prometheus"}},
		accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	full := &rest.Config{Host: srv.URL, RateLimiter: flowcontrol.NewFakeNeverRateLimiter()}
	g := newGuarded(t, full, defaultOptions())
	g.expect(g.get("tok"), http.StatusOK, 1, 1)
}
