package domain

// BundleCutter applies the bundling rule to a cabinet's notifications offered
// in sequence order: the first is always taken; a first that does not support
// bundling is a bundle of its own; after that, each next notification is taken
// while it supports bundling and the total weight stays within the limit. The
// first one that fails ends the bundle: nothing is ever skipped.
type BundleCutter struct {
	maxWeight int64
	weight    int64
	count     int
	closed    bool
}

// NewBundleCutter returns a cutter for bundles of at most maxWeight (the first
// notification may exceed it on its own).
func NewBundleCutter(maxWeight int64) *BundleCutter {
	return &BundleCutter{maxWeight: maxWeight}
}

// Offer reports whether a notification with these properties joins the
// bundle. Once it returns false the bundle is complete and every later offer
// is refused.
func (c *BundleCutter) Offer(supportsBundling bool, weight int64) bool {
	if c.closed {
		return false
	}
	if c.count == 0 {
		c.count, c.weight = 1, weight
		c.closed = !supportsBundling
		return true
	}
	// Written as a subtraction so that the sum can never overflow.
	if !supportsBundling || weight > c.maxWeight-c.weight {
		c.closed = true
		return false
	}
	c.count++
	c.weight += weight
	return true
}

// Closed reports whether the bundle can take no more notifications.
func (c *BundleCutter) Closed() bool { return c.closed }

// Count is the number of notifications taken.
func (c *BundleCutter) Count() int { return c.count }

// Weight is the total weight taken.
func (c *BundleCutter) Weight() int64 { return c.weight }
