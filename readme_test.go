package leasehold_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// exampleFiles hold the Examples whose bodies README go blocks may start:
// the root package's, and redisstore's for first use on a go-redis client.
var exampleFiles = []string{"example_test.go", "store/redisstore/example_test.go"}

// importPath matches a quoted import path, with or without a name before it.
var importPath = regexp.MustCompile(`"([^"]+)"`)

// Every go code block in the README must be the start of the body of an
// Example, which is compiled and whose output is checked, so the README
// cannot drift from working code. A block may begin with its imports, which
// the Example's file must import too: a newcomer sees every import a block
// needs.
func TestReadmeSamplesAreCompiledExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	type example struct{ file, imports, body string }
	var examples []example
	for _, name := range exampleFiles {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s: README.md's go blocks may start an Example there: %v", name, err)
			continue
		}
		imports, _, _ := strings.Cut(string(src), "\n)\n")
		for _, part := range strings.Split(string(src), "\nfunc Example")[1:] {
			_, body, _ := strings.Cut(part, "{\n")
			examples = append(examples, example{name, imports, flat(body)})
		}
	}
	blocks := strings.Split(string(readme), "```go\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("README.md has no go code block")
	}
	withImports := 0
	for _, block := range blocks {
		sample, _, _ := strings.Cut(block, "```")
		var paths []string
		if rest, ok := strings.CutPrefix(sample, "import ("); ok {
			decl, code, _ := strings.Cut(rest, "\n)\n")
			for _, m := range importPath.FindAllStringSubmatch(decl, -1) {
				paths = append(paths, m[1])
			}
			sample = code
			withImports++
		}
		found := false
		for _, ex := range examples {
			if !strings.HasPrefix(ex.body, flat(sample)) {
				continue
			}
			found = true
			for _, p := range paths {
				if !strings.Contains(ex.imports, `"`+p+`"`) {
					t.Errorf("README.md's sample imports %q, which %s does not", p, ex.file)
				}
			}
		}
		if !found {
			t.Errorf("README.md's sample is not the start of an Example's body in %s:\n%s",
				strings.Join(exampleFiles, " or "), sample)
		}
	}
	if withImports == 0 {
		t.Error("no go block of README.md shows its imports")
	}
}

func flat(s string) string { return strings.Join(strings.Fields(s), " ") }
