package leasehold_test

import (
	"os"
	"strings"
	"testing"
)

// Every go code block in the README must be the start of the body of an
// Example, which is compiled and whose output is checked, so the README
// cannot drift from working code.
func TestReadmeSamplesAreCompiledExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, part := range strings.Split(string(example), "\nfunc Example")[1:] {
		_, body, _ := strings.Cut(part, "{\n")
		bodies = append(bodies, flat(body))
	}
	blocks := strings.Split(string(readme), "```go\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("README.md has no go code block")
	}
	for _, block := range blocks {
		sample, _, _ := strings.Cut(block, "```")
		found := false
		for _, body := range bodies {
			found = found || strings.HasPrefix(body, flat(sample))
		}
		if !found {
			t.Errorf("README.md's sample is not the body of an Example in example_test.go:\n%s", sample)
		}
	}
}

func flat(s string) string { return strings.Join(strings.Fields(s), " ") }
