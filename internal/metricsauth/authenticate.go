package metricsauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// The groups the API server's authenticated-group adder looks for.
const (
	anonymousUser      = "system:anonymous"
	allAuthenticated   = "system:authenticated"
	allUnauthenticated = "system:unauthenticated"
)

// authenticator answers "who is this?" for a bearer token with a TokenReview.
type authenticator struct {
	client  rest.Interface
	backoff wait.Backoff
	timeout time.Duration
	ttl     time.Duration
	// cache maps tokenKey(token) to a *tokenAnswer. It never holds a token:
	// a heap dump shows keyed hashes that cannot be turned back into one.
	cache *cache.LRUExpireCache
	// rejected holds, under the same keys, the tokens the API server
	// rejected with an error, for rejectTTL: apart from cache, so that a
	// flood of bad tokens evicts no accepted one.
	rejected  *cache.LRUExpireCache
	rejectTTL time.Duration
	// lane bounds the reviews in flight, with the authorizer's.
	lane chan struct{}
	// hashKey is a random key for the token hashes, new in every process,
	// so a hash cannot even be checked against a guessed token.
	hashKey []byte
}

// tokenAnswer is what a TokenReview said of a token; user is nil when the
// token was not accepted.
type tokenAnswer struct {
	user *authenticationv1.UserInfo
}

func newAuthenticator(cfg *rest.Config, httpClient *http.Client, o options) (*authenticator, error) {
	c, err := restClientFor(cfg, httpClient, authenticationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	hashKey := make([]byte, sha256.Size)
	if _, err := rand.Read(hashKey); err != nil {
		return nil, err
	}
	return &authenticator{
		client:    c,
		backoff:   o.backoff,
		timeout:   o.tokenReviewTimeout,
		ttl:       o.tokenTTL,
		cache:     cache.NewLRUExpireCacheWithClock(o.cacheSize, o.clock),
		rejected:  cache.NewLRUExpireCacheWithClock(o.cacheSize, o.clock),
		rejectTTL: o.rejectTTL,
		lane:      o.lane,
		hashKey:   hashKey,
	}, nil
}

// authenticate returns the user the request's bearer token belongs to, with
// the group system:authenticated added as the API server adds it; nil and no
// error when there is no token or the API server rejects it; an error when
// the API server could not be asked. As in the API server, an accepted token
// is removed from the request, so that no handler is tempted to reuse it.
func (a *authenticator) authenticate(req *http.Request) (*authenticationv1.UserInfo, error) {
	token, ok := bearerToken(req.Header.Get("Authorization"))
	if !ok {
		return nil, nil
	}
	key := a.tokenKey(token)
	if _, rejected := a.rejected.Get(key); rejected {
		return nil, nil
	}
	var answer *tokenAnswer
	if cached, ok := a.cache.Get(key); ok {
		answer = cached.(*tokenAnswer)
	} else {
		var (
			cacheable bool
			err       error
		)
		if answer, cacheable, err = a.review(req.Context(), token); err != nil {
			return nil, err
		}
		switch {
		case cacheable:
			a.cache.Add(key, answer, a.ttl)
		case answer.user == nil:
			a.rejected.Add(key, struct{}{}, a.rejectTTL)
		}
	}
	if answer.user == nil {
		return nil, nil
	}
	req.Header.Del("Authorization")
	return answer.user, nil
}

// review sends the TokenReview. The spec has no audiences, like
// controller-runtime's: the API server then checks the token against its
// own.
//
// An answer is cacheable unless it is a rejection that comes with an error,
// which is what the API server says of a malformed, unknown or expired token
// and also of one it failed to check. Upstream's cache keeps no answer with
// an error either (it does not cache errors), so a token that failed for a
// passing reason is not shut out for a minute; such a rejection is kept
// apart, for rejectTTL only (authenticate), so that a flood of random
// tokens neither fills the cache nor evicts the legitimate callers' entries.
func (a *authenticator) review(ctx context.Context, token string) (answer *tokenAnswer, cacheable bool, err error) {
	leave, err := enter(a.lane)
	if err != nil {
		return nil, false, err
	}
	defer leave()
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	result := &authenticationv1.TokenReview{}
	if err := create(ctx, a.client, a.backoff, "tokenreviews", review, result); err != nil {
		return nil, false, err
	}
	if !result.Status.Authenticated {
		return &tokenAnswer{}, result.Status.Error == "", nil
	}
	user := result.Status.User
	if user.Username != anonymousUser &&
		!slices.Contains(user.Groups, allAuthenticated) && !slices.Contains(user.Groups, allUnauthenticated) {
		user.Groups = append(slices.Clip(user.Groups), allAuthenticated)
	}
	return &tokenAnswer{user: &user}, true, nil
}

// tokenKey is the cache key of a token: its HMAC-SHA256 under this
// process's random key.
func (a *authenticator) tokenKey(token string) [sha256.Size]byte {
	h := hmac.New(sha256.New, a.hashKey)
	h.Write([]byte(token))
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

// bearerToken parses an Authorization header as the API server's bearer
// token authenticator does: "Bearer" in any case, one space, a non-empty
// token; anything after a further space is ignored.
func bearerToken(header string) (string, bool) {
	parts := strings.SplitN(strings.TrimSpace(header), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}
