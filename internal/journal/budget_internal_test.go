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
