package prom_test

// The dashboard, the alert rules and the runbook live outside this module
// (deploy/, docs/); these tests keep them from drifting away from the
// metrics the Observer really exports.

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/prom"
	"github.com/leasehold/leasehold/store/memstore"
)

const (
	dashboardFile  = "../deploy/grafana/leasehold.json"
	alertsFile     = "../deploy/prometheus/alerts.yml"
	alertTestsFile = "../deploy/prometheus/alerts_test.yml"
	runbookFile    = "../docs/runbook.md"
	runbookURL     = "https://github.com/leasehold/leasehold/blob/main/docs/runbook.md"
)

// exported returns the metric families the Observer registers after real
// traffic on a Client (histograms and the TTL gauge appear with their first
// event), by name, and the series names a query may use: a counter's or
// gauge's name, a histogram's _bucket, _sum and _count.
func exported(t *testing.T) (families []string, series map[string]bool) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := leasehold.New(memstore.New(), leasehold.WithObserver(o.Observer()), leasehold.WithLogger(slog.New(slog.DiscardHandler)))
	defer c.Close()
	l, err := c.Acquire(t.Context(), "runs:R1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series = make(map[string]bool)
	for _, mf := range mfs {
		name := mf.GetName()
		families = append(families, name)
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			series[name+"_bucket"], series[name+"_sum"], series[name+"_count"] = true, true, true
		default:
			series[name] = true
		}
	}
	if len(families) != 14 {
		t.Fatalf("the Observer registers %d families: %v; update this test and the docs", len(families), families)
	}
	return families, series
}

var (
	quoted      = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	matchers    = regexp.MustCompile(`\{[^{}]*\}`)
	ranges      = regexp.MustCompile(`\[[^\]]*\]`)
	grouping    = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	variables   = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	identifiers = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	keywords    = []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "inf", "nan", "Inf", "NaN"}
)

// metricNames returns the metric names a PromQL expression selects: what is
// left once strings, label matchers, ranges, grouping clauses, Grafana
// variables, function names, keywords and numbers are taken out.
func metricNames(expr string) []string {
	s := quoted.ReplaceAllString(expr, " ")
	s = variables.ReplaceAllString(s, " ")
	s = matchers.ReplaceAllString(s, " ")
	s = ranges.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range identifiers.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if loc[0] > 0 && (s[loc[0]-1] == '.' || s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9') {
			continue // the exponent of a number: 1e3
		}
		if strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") || slices.Contains(keywords, id) {
			continue // a function, or an operator
		}
		names = append(names, id)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (namespace, le) (rate(leasehold_lock_wait_seconds_bucket{namespace!="leader"}[5m]))) > 2`:      {"leasehold_lock_wait_seconds_bucket"},
		`sum by (namespace) (increase(a_total[10m])) / sum by (namespace) (increase(b_total{result="acquired"}[10m])) > 0.01 and c > 2`: {"a_total", "b_total", "c"},
		`60 * sum by (namespace) (rate(x_total{namespace=~"$namespace"}[$__rate_interval])) > 1e3`:                                      {"x_total"},
		`up == 0 and on (instance) node_load1 offset 5m`:                                                                                {"up", "node_load1"},
		`1 - sum(rate(h_bucket{le="60", ns=~"${namespace}"}[5m])) / sum(rate(h_count[5m]))`:                                             {"h_bucket", "h_count"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %v, want %v", expr, got, want)
		}
	}
}

// checkExpr reports an expression that selects no metric or one the Observer
// does not export (including any name outside leasehold_*).
func checkExpr(t *testing.T, where, expr string, series map[string]bool, used map[string]bool) {
	t.Helper()
	names := metricNames(expr)
	if len(names) == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
	for _, n := range names {
		if !series[n] {
			t.Errorf("%s: %q uses %s, which the Observer does not export", where, expr, n)
		}
		used[n] = true
	}
}

// family maps a series name to its metric family.
func family(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suffix); ok && strings.HasSuffix(f, "_seconds") {
			return f
		}
	}
	return name
}

// runbookAnchors returns the anchors GitHub makes for the runbook's headings,
// and explicit <a id=…> anchors.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	anchors := make(map[string]bool)
	punct := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for line := range strings.SplitSeq(string(b), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			h = strings.ToLower(strings.TrimSpace(h))
			anchors[strings.ReplaceAll(punct.ReplaceAllString(h, ""), " ", "-")] = true
		}
	}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"`).FindAllStringSubmatch(string(b), -1) {
		anchors[m[1]] = true
	}
	return anchors
}

func checkRunbookURL(t *testing.T, where, url string, anchors map[string]bool) {
	t.Helper()
	anchor, ok := strings.CutPrefix(url, runbookURL+"#")
	if !ok {
		t.Errorf("%s: runbook link %q is not %s#anchor", where, url, runbookURL)
		return
	}
	if !anchors[anchor] {
		t.Errorf("%s: docs/runbook.md has no anchor #%s", where, anchor)
	}
}

// The dashboard's queries use only metrics the Observer exports, every
// exported metric has a panel, and the dashboard is importable as shared:
// its datasource is the ${DS_PROMETHEUS} input and it filters by namespace.
func TestDashboardMatchesMetrics(t *testing.T) {
	families, series := exported(t)
	anchors := runbookAnchors(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Inputs []struct {
			Name     string
			Type     string
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
		SchemaVersion int `json:"schemaVersion"`
		UID           string
		Templating    struct {
			List []struct {
				Name, Type string
				Datasource struct{ Type, UID string }
				Definition string
			}
		}
		Panels []json.RawMessage
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want ≥ 36", dash.SchemaVersion)
	}
	if len(dash.Inputs) != 1 || dash.Inputs[0].Name != "DS_PROMETHEUS" || dash.Inputs[0].Type != "datasource" || dash.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs = %+v, want the DS_PROMETHEUS datasource input", dash.Inputs)
	}
	var hasNamespace bool
	for _, v := range dash.Templating.List {
		if v.Name == "namespace" {
			hasNamespace = true
			if v.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("variable namespace uses datasource %q", v.Datasource.UID)
			}
			m := regexp.MustCompile(`^label_values\((\w+), namespace\)$`).FindStringSubmatch(v.Definition)
			if m == nil || !series[m[1]] {
				t.Errorf("variable namespace: %q is not label_values over an exported metric", v.Definition)
			}
		}
	}
	if !hasNamespace {
		t.Error("no namespace template variable")
	}

	used := make(map[string]bool)
	var exprs int
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok && v["gridPos"] != nil {
				where = title // a panel's
			}
			if ds, ok := v["datasource"].(map[string]any); ok && ds["type"] == "prometheus" && ds["uid"] != "${DS_PROMETHEUS}" {
				t.Errorf("%s: datasource uid %v, want ${DS_PROMETHEUS}", where, ds["uid"])
			}
			if expr, ok := v["expr"].(string); ok {
				exprs++
				checkExpr(t, where, expr, series, used)
			}
			if url, ok := v["url"].(string); ok && strings.Contains(url, "runbook.md#") {
				checkRunbookURL(t, where, url, anchors)
			}
			for _, child := range v {
				walk(where, child)
			}
		case []any:
			for _, child := range v {
				walk(where, child)
			}
		}
	}
	for _, p := range dash.Panels {
		var v any
		if err := json.Unmarshal(p, &v); err != nil {
			t.Fatal(err)
		}
		walk("", v)
	}
	if exprs < 10 {
		t.Errorf("only %d queries in the dashboard", exprs)
	}
	for _, f := range families {
		var shown bool
		for n := range used {
			shown = shown || family(n) == f
		}
		if !shown {
			t.Errorf("no dashboard panel shows %s", f)
		}
	}
}

type alertRule struct {
	Alert       string
	Expr        string
	For         string
	Labels      map[string]string
	Annotations map[string]string
}

func readAlerts(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string
			Rules []alertRule
		}
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// The alert rules use only exported metrics, say why and where to look, and
// are on sustained conditions: each rule's `for` is at least its longest
// range window, so that one burst of events cannot keep it true long enough
// to fire.
func TestAlertsMatchMetrics(t *testing.T) {
	_, series := exported(t)
	anchors := runbookAnchors(t)
	rules := readAlerts(t)
	if len(rules) < 4 {
		t.Fatalf("%d alert rules, want at least 4", len(rules))
	}
	used := make(map[string]bool)
	windows := regexp.MustCompile(`\[(\d+[smh])\]`)
	for _, r := range rules {
		if r.Alert == "" {
			t.Errorf("a rule without an alert name: %q", r.Expr)
			continue
		}
		checkExpr(t, r.Alert, r.Expr, series, used)
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		checkRunbookURL(t, r.Alert, r.Annotations["runbook_url"], anchors)
		if r.Labels["severity"] == "" {
			t.Errorf("%s: no severity label", r.Alert)
		}
		hold, err := time.ParseDuration(r.For)
		if err != nil {
			t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			continue
		}
		for _, m := range windows.FindAllStringSubmatch(r.Expr, -1) {
			if w, _ := time.ParseDuration(m[1]); hold < w {
				t.Errorf("%s: for %v is shorter than its window %v: one burst could fire it", r.Alert, hold, w)
			}
		}
	}
}

// Every alert has a unit test in which it fires, and one in which it must
// stay silent.
func TestEveryAlertIsUnitTested(t *testing.T) {
	b, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			Name          string
			AlertRuleTest []struct {
				AlertName string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName]++
			} else {
				silent[a.AlertName]++
			}
		}
	}
	for _, r := range readAlerts(t) {
		if fires[r.Alert] == 0 || silent[r.Alert] == 0 {
			t.Errorf("%s: %d checks that it fires, %d that it stays silent; want both", r.Alert, fires[r.Alert], silent[r.Alert])
		}
	}
}

// promtool checks the rules and runs their unit tests (Debian package
// prometheus, which make test installs). The Makefile runs it as well.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if errors.Is(err, exec.ErrNotFound) {
		// Never skip: make test installs promtool (Debian package prometheus).
		t.Fatal("promtool not found on PATH: install the Debian package prometheus (make test does this when run as root)")
	}
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", alertTestsFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The runbook's own links resolve: every #anchor to one of its headings,
// every relative link to a file of the repository.
func TestRunbookLinks(t *testing.T) {
	anchors := runbookAnchors(t)
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(string(b), -1) {
		link := m[1]
		switch {
		case strings.HasPrefix(link, "#"):
			if !anchors[link[1:]] {
				t.Errorf("runbook link %s: no such heading", link)
			}
		case strings.Contains(link, "://"):
		default:
			path, _, _ := strings.Cut(link, "#")
			if _, err := os.Stat("../docs/" + path); err != nil {
				t.Errorf("runbook link %s: %v", link, err)
			}
		}
	}
}
