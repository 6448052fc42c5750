package leasehold

// Renewing is how many leases c's renewal engine keeps alive.
func Renewing(c *Client) int { return c.renew.len() }

// Lines is how many keys have a line in c (waiters, or counted leases), for
// tests that check idle keys take no memory.
func Lines(c *Client) int {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	return len(c.lines.keys)
}

// Waiting is how many goroutines of c wait for key.
func Waiting(c *Client, key string) int {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	if ln := c.lines.keys[key]; ln != nil {
		return ln.waiters.Len()
	}
	return 0
}
