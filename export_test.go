package leasehold

// LocalTurns is how many keys have Hold callers holding or waiting in c,
// for tests that check idle keys take no memory.
func LocalTurns(c *Client) int { return c.local.len() }

// Renewing is how many leases c's renewal engine keeps alive.
func Renewing(c *Client) int { return c.renew.len() }
