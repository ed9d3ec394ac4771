package throttle

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestReleaseDelayWaitsForTheFirstTickAtOrAfterTheToken(t *testing.T) {
	base := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	tick := 250 * time.Millisecond
	for _, tc := range []struct {
		name       string
		now        time.Time
		delay      time.Duration
		tick       time.Duration
		wantWait   time.Duration
		wantAtTick bool
	}{
		{"a token at hand goes at once", base.Add(10 * time.Millisecond), 0, tick, 0, false},
		{"due mid-tick waits for the tick", base.Add(10 * time.Millisecond), 5 * time.Millisecond, tick, 240 * time.Millisecond, true},
		{"due exactly on a tick goes then", base.Add(10 * time.Millisecond), 240 * time.Millisecond, tick, 240 * time.Millisecond, true},
		{"due several ticks ahead", base, 600 * time.Millisecond, tick, 750 * time.Millisecond, true},
		{"no tick: when due", base.Add(3 * time.Millisecond), 5 * time.Millisecond, 0, 5 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := releaseDelay(tc.now, tc.delay, tc.tick)
			if got != tc.wantWait {
				t.Errorf("waits %v, want %v", got, tc.wantWait)
			}
			if got < tc.delay {
				t.Errorf("released %v before its token is due", tc.delay-got)
			}
			if at := tc.now.Add(got); tc.wantAtTick && !at.Equal(at.Truncate(tc.tick)) {
				t.Errorf("released at %v, not on a tick", at)
			}
		})
	}
}

// The bucket bounds what passes whatever the tick: burst at once, then qps a
// second. (Only a lower bound on the elapsed time is asserted: a slow
// machine makes it longer, never shorter.)
func TestLimiterNeverLetsMoreThroughThanTheBucket(t *testing.T) {
	const qps, burst, n = 100, 5, 25
	l := New(qps, burst, 30*time.Millisecond)
	start := time.Now()
	for range n {
		if err := l.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if min := time.Duration(n-burst) * time.Second / qps; time.Since(start) < min {
		t.Errorf("%d requests passed in %v; the bucket allows no less than %v", n, time.Since(start), min)
	}
	if l.QPS() != qps {
		t.Errorf("QPS() = %v", l.QPS())
	}
}

func TestLimiterGivesTheTokenBackWhenTheWaitIsCancelled(t *testing.T) {
	l := New(1, 1, time.Second)
	if !l.TryAccept() {
		t.Fatal("a fresh bucket has no token")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx); err == nil {
		t.Fatal("a cancelled wait succeeded")
	}
	// The cancelled reservation gave its token back: the next one is due in
	// about a second, not two.
	r := l.bucket.Reserve()
	if d := r.Delay(); d > 1100*time.Millisecond {
		t.Errorf("next token due in %v: the cancelled wait kept its token", d)
	}
}

func TestLimiterRefusesAWaitBeyondTheDeadline(t *testing.T) {
	l := New(1, 1, 0)
	l.Accept()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.Wait(ctx); err == nil {
		t.Fatal("a wait of a second within a 10 ms deadline succeeded")
	}
	if time.Since(start) > 500*time.Millisecond {
		t.Errorf("waited %v before giving up on a deadline it could not meet", time.Since(start))
	}
}

// A background request waits while foreground requests hold the bucket's
// tokens, and goes once the foreground leaves more than half the burst.
func TestBackgroundRequestsTakeOnlySpareTokens(t *testing.T) {
	const qps, burst = 20, 4
	l := New(qps, burst, 0)
	ctx := context.Background()
	// The foreground empties the bucket and reserves two tokens ahead.
	start := time.Now()
	for range burst + 2 {
		go func() { _ = l.Wait(ctx) }()
	}
	time.Sleep(10 * time.Millisecond)
	if err := l.Wait(Background(ctx)); err != nil {
		t.Fatal(err)
	}
	// The two reserved tokens come at 50 and 100 ms; the background one
	// needs the bucket back above burst/2, three tokens more: 250 ms.
	if took := time.Since(start); took < 240*time.Millisecond {
		t.Errorf("background request went after %v, before the foreground's reservations and half the burst were back", took)
	}
	// Right after a foreground request, the background leaves half the
	// burst in the bucket for the next ones.
	l = New(qps, burst, 0)
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !backgroundGoesWithin(l, 5*time.Millisecond) {
		t.Fatal("a background request waited although the bucket held more than half its burst")
	}
	if backgroundGoesWithin(l, 20*time.Millisecond) {
		t.Error("a background request took a token from the half of the burst kept for the foreground")
	}
	if !l.TryAccept() {
		t.Error("the foreground found no token left by the background")
	}
	// Once the foreground is quiet, the background may use the whole burst.
	l = New(qps, burst, 0)
	for i := range burst {
		if !backgroundGoesWithin(l, 5*time.Millisecond) {
			t.Fatalf("background request %d waited on a bucket no foreground request uses", i)
		}
	}
}

// backgroundGoesWithin reports whether a background request gets a token
// within d.
func backgroundGoesWithin(l *Limiter, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(Background(context.Background()), d)
	defer cancel()
	return l.Wait(ctx) == nil
}

func TestBackgroundWaiterLooksAgainOnTheNextTickOfTheClock(t *testing.T) {
	base := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		tick time.Duration
		now  time.Time
		want time.Duration
	}{
		{"early in a tick", 250 * time.Millisecond, base.Add(10 * time.Millisecond), 240 * time.Millisecond},
		{"late in a tick", 250 * time.Millisecond, base.Add(240 * time.Millisecond), 10 * time.Millisecond},
		{"on a tick: the next one", 250 * time.Millisecond, base, 250 * time.Millisecond},
		{"no tick: one token's time", 0, base.Add(3 * time.Millisecond), 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(200, 10, tc.tick)
			if got := l.nextLook(tc.now); got != tc.want {
				t.Errorf("looks again after %v, want %v", got, tc.want)
			}
		})
	}
}

// Background waiters that started at different moments of a tick get their
// tokens on the same tick, so their requests go out together. (Each on a
// timer of its own, they would go a tick after their own start, 300 ms
// apart here.)
func TestBackgroundWaitersGoTogetherOnTheTick(t *testing.T) {
	// A token every 200 ms: a waiter that starts up to 200 ms late still
	// finds the bucket empty; the 680 ms between the second drain and the
	// tick gather a token for each of the two.
	const tick, qps = time.Second, 5
	l := New(qps, 10, tick)
	// Start just after a tick, so that the two waiters' starts share it.
	time.Sleep(time.Until(time.Now().Truncate(tick).Add(tick + 20*time.Millisecond)))
	released := make(chan time.Time, 2)
	wait := func() {
		if err := l.Wait(Background(context.Background())); err != nil {
			t.Error(err)
		}
		released <- time.Now()
	}
	for l.TryAccept() {
	}
	go wait()
	time.Sleep(300 * time.Millisecond)
	for l.TryAccept() {
	}
	go wait()
	first, second := <-released, <-released
	if gap := second.Sub(first).Abs(); gap > 150*time.Millisecond {
		t.Errorf("the two background waiters went %v apart, not on one tick", gap)
	}
}

// While the server is busy a background request waits, whatever tokens
// the bucket holds; it goes once the server is no longer busy, or, with
// a deadline, once the deadline passes, in line as the foreground goes.
func TestBackgroundWaitsWhileTheServerIsBusyUntilItsDeadline(t *testing.T) {
	l := New(1000, 100, 10*time.Millisecond)
	var busy atomic.Bool
	busy.Store(true)
	l.SetServerBusy(busy.Load)

	done := make(chan error, 1)
	go func() { done <- l.Wait(Background(context.Background())) }()
	select {
	case err := <-done:
		t.Fatalf("a background request went while the server was busy (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	busy.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the background request did not go once the server was no longer busy")
	}

	busy.Store(true)
	start := time.Now()
	if err := l.Wait(BackgroundUntil(context.Background(), start.Add(150*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond || waited > 2*time.Second {
		t.Errorf("a background request with a deadline 150ms ahead went after %v, want at the deadline", waited)
	}
	// A foreground request never waits for the server's business.
	start = time.Now()
	if err := l.Wait(context.Background()); err != nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("a foreground request waited %v (err %v) while the server was busy", time.Since(start), err)
	}
}

// Background requests past their deadline share the rate with a
// foreground that keeps the bucket reserved, a token each in turn: they
// are not each queued behind a turn of the foreground's, and the
// foreground keeps half the rate.
func TestOverdueBackgroundRequestsShareTheRateWithTheForeground(t *testing.T) {
	const qps, foreground, overdue = 100, 8, 20
	l := New(qps, 1, 0)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var foregroundWent atomic.Int64
	done := make(chan struct{})
	for range foreground {
		go func() {
			defer func() { done <- struct{}{} }()
			for l.Wait(ctx) == nil {
				foregroundWent.Add(1)
			}
		}()
	}
	// Let the foreground fill the queue: each of its requests waits a turn
	// of eight tokens.
	time.Sleep(200 * time.Millisecond)
	start, before := time.Now(), foregroundWent.Load()
	for i := range overdue {
		if err := l.Wait(BackgroundUntil(ctx, time.Now())); err != nil {
			t.Fatalf("overdue request %d: %v", i, err)
		}
	}
	took, meanwhile := time.Since(start), foregroundWent.Load()-before
	t.Logf("%d overdue requests went in %v, the foreground %d times meanwhile", overdue, took, meanwhile)
	// Behind the foreground, each would wait its turn of nine tokens: 20
	// requests, 1.8 s. Sharing, the eight tokens reserved before the first
	// came and then two tokens each: 0.48 s.
	if took > 1200*time.Millisecond {
		t.Errorf("%d overdue requests took %v: they waited in line behind the foreground", overdue, took)
	}
	// Ahead of the foreground, it would have had only the eight it had
	// reserved; sharing, about as many more as the overdue requests took.
	if meanwhile < foreground+overdue/2 {
		t.Errorf("the foreground went %d times while %d overdue requests went: it did not keep its share", meanwhile, overdue)
	}
	// Once none is overdue, the foreground has the whole rate again.
	before = foregroundWent.Load()
	time.Sleep(200 * time.Millisecond)
	if got := foregroundWent.Load() - before; got < qps/10 {
		t.Errorf("the foreground went %d times in 200 ms once no request was overdue, want about %d", got, qps/5)
	}
	stop()
	for range foreground {
		<-done
	}
}
