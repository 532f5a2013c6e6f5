package journal

import (
	"context"
	"testing"
	"time"
)

// The budget's rules: what fits is taken; past the limit a holder waits
// (woken by the next give), except one that holds nothing while some is
// left, and the rest of a revision (force); upload slots are bounded.
func TestBudgetRules(t *testing.T) {
	t.Parallel()
	if NewBudget(0) != nil {
		t.Fatal("a zero budget is no budget")
	}
	var none *Budget
	none.give(5) // nil-safe
	if none.pressed() {
		t.Fatal("no budget is never pressed")
	}
	b := NewBudget(100)
	if ok, _ := b.take(60, false, false); !ok {
		t.Fatal("60 of 100 refused")
	}
	ok, wake := b.take(50, false, false)
	if ok {
		t.Fatal("110 of 100 taken by a holder")
	}
	if ok, _ := b.take(50, false, true); !ok {
		t.Fatal("a capture holding nothing may go past the limit while some is left")
	}
	if ok, _ := b.take(10, false, true); ok {
		t.Fatal("nothing left: even a capture holding nothing waits")
	}
	if ok, _ := b.take(30, true, false); !ok {
		t.Fatal("the rest of a revision is always taken")
	}
	if used, peak := b.Used(); used != 140 || peak != 140 {
		t.Fatalf("used %d, peak %d", used, peak)
	}
	select {
	case <-wake:
		t.Fatal("woken before any give")
	default:
	}
	b.give(100)
	select {
	case <-wake:
	case <-time.After(time.Second):
		t.Fatal("a give does not wake the waiting")
	}
	if used, _ := b.Used(); used != 40 {
		t.Fatalf("used %d after giving 100 of 140", used)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var dones []func()
	for range BudgetUploads {
		done, err := b.upload(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, done)
	}
	if _, err := b.upload(ctx); err == nil {
		t.Fatalf("upload slot %d given", BudgetUploads+1)
	}
	dones[0]()
	if done, err := b.upload(context.Background()); err != nil {
		t.Fatal(err)
	} else {
		done()
	}
}

// A capture that stops its watch gives back the credit it took for the
// message it drops, and then waits as one holding nothing: captures idle
// with credit never hold the whole budget while others wait for it (a
// namespace's journal stalled for good).
func TestBudgetWaitHoldsNothing(t *testing.T) {
	t.Parallel()
	b := NewBudget(100)
	a := &capture{o: CaptureOptions{Budget: b}}
	c := &capture{o: CaptureOptions{Budget: b}}
	// Both took credit for messages they then dropped (a pause, a stall).
	for _, x := range []*capture{a, c} {
		if ok, _ := b.take(48, false, true); !ok {
			t.Fatal("credit refused")
		}
		x.credit = 48
	}
	a.dropCredit()
	c.dropCredit()
	if used, _ := b.Used(); used != 0 {
		t.Fatalf("%d bytes held after both dropped their credit", used)
	}
	// Others hold 95: a waiting capture still gets one message past it.
	if ok, _ := b.take(95, false, false); !ok {
		t.Fatal("95 of 100 refused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.waitBudget(ctx, 10); err != nil || a.credit != 10 {
		t.Fatalf("a capture holding nothing waited with 5 bytes left: %v (credit %d)", err, a.credit)
	}
	// Nothing left: it waits until a give.
	done := make(chan error, 1)
	go func() { done <- c.waitBudget(ctx, 10) }()
	select {
	case err := <-done:
		t.Fatalf("took budget with none left: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	b.give(95)
	if err := <-done; err != nil || c.credit != 10 {
		t.Fatalf("not woken by a give: %v (credit %d)", err, c.credit)
	}
}
