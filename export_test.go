package leasehold

// LocalTurns is how many keys have Hold callers holding or waiting in c,
// for tests that check idle keys take no memory.
func LocalTurns(c *Client) int { return c.local.len() }
