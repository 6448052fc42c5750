package leasehold_test

import (
	"os"
	"strings"
	"testing"
)

// The README's code sample must be the body of Example, which is compiled and
// whose output is checked, so the README cannot drift from working code.
func TestReadmeSampleIsTheCompiledExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "```go\n")
	sample, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no go code block")
	}
	_, body, ok := strings.Cut(string(example), "func Example() {\n")
	if !ok {
		t.Fatal("example_test.go has no func Example")
	}
	if !strings.HasPrefix(flat(body), flat(sample)) {
		t.Fatalf("README.md's sample differs from Example in example_test.go:\n%s", sample)
	}
}

func flat(s string) string { return strings.Join(strings.Fields(s), " ") }
