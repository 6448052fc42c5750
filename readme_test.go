package leasehold_test

import (
	"os"
	"strings"
	"testing"
)

// exampleFiles hold the Examples whose bodies README go blocks may start:
// the root package's, and redisstore's for first use on a go-redis client.
var exampleFiles = []string{"example_test.go", "store/redisstore/example_test.go"}

// Every go code block in the README must be the start of the body of an
// Example, which is compiled and whose output is checked, so the README
// cannot drift from working code.
func TestReadmeSamplesAreCompiledExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, name := range exampleFiles {
		example, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s: README.md's go blocks may start an Example there: %v", name, err)
			continue
		}
		for _, part := range strings.Split(string(example), "\nfunc Example")[1:] {
			_, body, _ := strings.Cut(part, "{\n")
			bodies = append(bodies, flat(body))
		}
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
			t.Errorf("README.md's sample is not the start of an Example's body in %s:\n%s",
				strings.Join(exampleFiles, " or "), sample)
		}
	}
}

func flat(s string) string { return strings.Join(strings.Fields(s), " ") }
