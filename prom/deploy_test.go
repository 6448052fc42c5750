package prom_test

// The dashboard, the alert rules and the runbook live outside this module
// (deploy/, docs/); these tests keep them from drifting away from the
// metrics the Observer really exports.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
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
	dashboardFile   = "../deploy/grafana/leasehold.json"
	rulesDir        = "../deploy/prometheus"
	alertTestsFile  = "../deploy/prometheus/alerts_test.yml"
	provisioningDir = "../deploy/grafana/provisioning"
	runbookFile     = "../docs/runbook.md"
	runbookURL      = "https://github.com/leasehold/leasehold/blob/main/docs/runbook.md"
)

// exported returns the metric families the Observer registers after real
// traffic on a Client (histograms and the TTL gauge appear with their first
// event), by name, and the series names a query may use: a counter's or
// gauge's name, a histogram's _bucket, _sum and _count.
// downStore is a store whose acquires fail.
type downStore struct{ *memstore.Store }

func (downStore) Acquire(context.Context, string, string, time.Duration) (int64, error) {
	return 0, errors.New("store down")
}

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
	// A store call that fails, for leasehold_store_call_failures_total.
	down := leasehold.New(downStore{memstore.New()}, leasehold.WithObserver(o.Observer()), leasehold.WithLogger(slog.New(slog.DiscardHandler)))
	defer down.Close()
	if _, err := down.TryAcquire(t.Context(), "runs:R2", time.Minute); err == nil {
		t.Fatal("TryAcquire on a store that is down succeeded")
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
	if len(families) != 15 {
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

// checkExpr reports an expression that selects no metric or one outside
// series (the exported ones, and the recording rules where allowed).
func checkExpr(t *testing.T, where, expr string, series map[string]bool, used map[string]bool) {
	t.Helper()
	names := metricNames(expr)
	if len(names) == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
	for _, n := range names {
		if !series[n] {
			t.Errorf("%s: %q uses %s, which is neither an exported series nor a recording rule allowed here", where, expr, n)
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

type dsRef struct{ Type, UID string }

type dashTarget struct {
	Datasource *dsRef
	RefID      string `json:"refId"`
	Expr       string
}

type dashPanel struct {
	Type, Title string
	Datasource  *dsRef
	Targets     []dashTarget
	Panels      []dashPanel // a collapsed row's
	Links       []struct{ URL string }
}

type dashboard struct {
	Inputs        []json.RawMessage `json:"__inputs"`
	SchemaVersion int               `json:"schemaVersion"`
	UID           string
	Templating    struct {
		List []struct {
			Name, Type string
			Query      any
			Datasource *dsRef
			Definition string
		}
	}
	Panels []dashPanel
}

var (
	// leaseholdSeries finds each series a query selects, raw or recorded,
	// with its label matchers.
	leaseholdSeries = regexp.MustCompile(`\b((?:[a-z_]+:)?leasehold_[a-z_]+(?::[a-z0-9_]+)?)\s*(\{[^}]*\})?`)
	quantileArg     = regexp.MustCompile(`histogram_quantile\(\s*0\.\d+\s*,`)
	number          = regexp.MustCompile(`(?:^|[^\w.$])(\d+(?:\.\d+)?)`)
)

// queryProblems returns what is wrong with a dashboard query: a series
// selected without the $job and $instance filters, or a hard-coded number (a
// threshold such as a 60 s TTL, or a range) other than a quantile.
func queryProblems(expr string) []string {
	var problems []string
	for _, m := range leaseholdSeries.FindAllStringSubmatch(expr, -1) {
		if !strings.Contains(m[2], `job=~"$job"`) || !strings.Contains(m[2], `instance=~"$instance"`) {
			problems = append(problems, m[1]+m[2]+" is not filtered by $job and $instance")
		}
	}
	rest := variables.ReplaceAllString(quantileArg.ReplaceAllString(expr, " "), " ")
	if m := number.FindStringSubmatch(rest); m != nil {
		problems = append(problems, "hard-codes "+m[1])
	}
	return problems
}

func TestQueryProblems(t *testing.T) {
	sel := `{job=~"$job",instance=~"$instance"}`
	for expr, want := range map[string]int{
		`histogram_quantile(0.99, sum by (le) (rate(leasehold_lock_held_seconds_bucket` + sel + `[$__rate_interval])))`: 0,
		`sum(a:leasehold_x:rate5m` + sel + `) / on (namespace) max(leasehold_lock_ttl_seconds` + sel + `)`:              0,
		`sum(rate(leasehold_lock_held_seconds_bucket{job=~"$job",instance=~"$instance",le="60"}[$__rate_interval]))`:    1,
		`sum(rate(leasehold_lock_held_seconds_bucket` + sel + `[5m]))`:                                                  1,
		`sum(leasehold_leases_held` + sel + `) > 60`:                                                                    1,
		`60 * sum(rate(leasehold_lock_acquire_total` + sel + `[$__rate_interval]))`:                                     1,
		`sum(leasehold_leases_held{job=~"$job"})`:                                                                       1,
		`sum(a:leasehold_x:rate5m) / sum(leasehold_leases_held` + sel + `)`:                                             1,
	} {
		if got := queryProblems(expr); len(got) != want {
			t.Errorf("queryProblems(%s) = %q, want %d problems", expr, got, want)
		}
	}
}

// The dashboard's queries use only metrics the Observer exports and the
// recording rules, every exported metric has a panel, and the same JSON can
// be imported or provisioned: no __inputs, every panel and query on the
// datasource variable, every query filtered by the job and instance
// variables, and no hard-coded thresholds (hold times are relative to the
// TTL the namespace reports).
func TestDashboardMatchesMetrics(t *testing.T) {
	families, series := exported(t)
	recorded := readRules(t).recorded
	known := maps.Clone(series)
	for name := range recorded {
		known[name] = true
	}
	anchors := runbookAnchors(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want ≥ 36", dash.SchemaVersion)
	}
	if len(dash.Inputs) > 0 || strings.Contains(string(b), "${DS_") {
		t.Error("the dashboard uses __inputs (${DS_…}): file provisioning cannot fill them in; use the datasource variable")
	}
	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Definition
		switch {
		case v.Type == "datasource":
			if v.Name != "datasource" || v.Query != "prometheus" {
				t.Errorf("datasource variable %q with query %v, want datasource, prometheus", v.Name, v.Query)
			}
		case v.Datasource == nil || *v.Datasource != (dsRef{"prometheus", "${datasource}"}):
			t.Errorf("variable %s uses datasource %+v, want ${datasource}", v.Name, v.Datasource)
		}
	}
	if _, ok := vars["datasource"]; !ok {
		t.Error("no datasource variable")
	}
	for name, want := range map[string]*regexp.Regexp{
		"job":       regexp.MustCompile(`^label_values\(leasehold_build_info, job\)$`),
		"instance":  regexp.MustCompile(`^label_values\(leasehold_build_info\{job=~"\$job"\}, instance\)$`),
		"namespace": regexp.MustCompile(`^label_values\((\w+)\{job=~"\$job",instance=~"\$instance"\}, namespace\)$`),
	} {
		m := want.FindStringSubmatch(vars[name])
		if m == nil || len(m) > 1 && !series[m[1]] {
			t.Errorf("variable %s: %q, want %v over an exported metric", name, vars[name], want)
		}
	}

	used := make(map[string]bool)
	var queries int
	var check func(p dashPanel)
	check = func(p dashPanel) {
		for _, l := range p.Links {
			if strings.Contains(l.URL, "runbook.md#") {
				checkRunbookURL(t, p.Title, l.URL, anchors)
			}
		}
		if p.Type == "row" {
			for _, c := range p.Panels {
				check(c)
			}
			return
		}
		if p.Datasource == nil || *p.Datasource != (dsRef{"prometheus", "${datasource}"}) {
			t.Errorf("%s: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no targets", p.Title)
		}
		for _, tg := range p.Targets {
			where := p.Title + " " + tg.RefID
			if tg.Datasource == nil || *tg.Datasource != (dsRef{"prometheus", "${datasource}"}) {
				t.Errorf("%s: datasource %+v, want the ${datasource} variable", where, tg.Datasource)
			}
			queries++
			checkExpr(t, where, tg.Expr, known, used)
			for _, p := range queryProblems(tg.Expr) {
				t.Errorf("%s: %q: %s", where, tg.Expr, p)
			}
		}
	}
	for _, p := range dash.Panels {
		check(p)
	}
	if queries < 15 {
		t.Errorf("only %d queries in the dashboard", queries)
	}
	shown := make(map[string]bool)
	for n := range used {
		for _, raw := range expand(n, recorded) {
			shown[family(raw)] = true
		}
	}
	for _, f := range families {
		if !shown[f] {
			t.Errorf("no dashboard panel shows %s", f)
		}
	}
}

// expand returns the exported series that name stands for: itself, or those
// its recording rule selects, recursively.
func expand(name string, recorded map[string]string) []string {
	expr, ok := recorded[name]
	if !ok {
		return []string{name}
	}
	var raw []string
	for _, n := range metricNames(expr) {
		raw = append(raw, expand(n, recorded)...)
	}
	return raw
}

type rule struct {
	Record      string
	Alert       string
	Expr        string
	For         string
	Labels      map[string]string
	Annotations map[string]string
}

type rules struct {
	files    []string          // rule files, not their tests
	alerts   []rule            // in file order
	records  []rule            // in evaluation order
	recorded map[string]string // expression by recorded name
}

// readRules reads every rule file of deploy/prometheus (every .yml but the
// *_test.yml unit tests).
func readRules(t *testing.T) rules {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(rulesDir, "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	rs := rules{recorded: make(map[string]string)}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.yml") {
			continue
		}
		rs.files = append(rs.files, file)
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Groups []struct {
				Name  string
				Rules []rule
			}
		}
		if err := yaml.UnmarshalStrict(b, &f); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, g := range f.Groups {
			for _, r := range g.Rules {
				switch {
				case r.Record != "" && r.Alert == "":
					if _, dup := rs.recorded[r.Record]; dup {
						t.Errorf("%s: recording rule %s defined twice", file, r.Record)
					}
					rs.records = append(rs.records, r)
					rs.recorded[r.Record] = r.Expr
				case r.Alert != "" && r.Record == "":
					rs.alerts = append(rs.alerts, r)
				default:
					t.Errorf("%s: a rule that is not either an alert or a recording rule: %q", file, r.Expr)
				}
			}
		}
	}
	if len(rs.files) < 2 {
		t.Fatalf("rule files %v, want alerts.yml and rules.yml at least", rs.files)
	}
	return rs
}

var (
	// level:metric:operations, the metric a leasehold one.
	recordName = regexp.MustCompile(`^([a-z]+(?:_[a-z]+)*):(leasehold_[a-z_]+):([a-z0-9_]+)$`)
	windows    = regexp.MustCompile(`\[(\d+[smh])\]`)
)

// The recording rules are named level:metric:operations, their operations
// naming their window, and select only exported series or rules evaluated
// before them.
func TestRecordingRules(t *testing.T) {
	_, series := exported(t)
	rs := readRules(t)
	if len(rs.records) < 8 {
		t.Fatalf("%d recording rules, want the alerts' ratios and quantiles", len(rs.records))
	}
	before := maps.Clone(series)
	used := make(map[string]bool)
	for _, r := range rs.records {
		m := recordName.FindStringSubmatch(r.Record)
		if m == nil {
			t.Errorf("%s: not named level:leasehold_metric:operations", r.Record)
			continue
		}
		for _, label := range strings.Split(m[1], "_") {
			if !strings.Contains(r.Expr, label) {
				t.Errorf("%s: level %s, but the expression does not keep %s", r.Record, m[1], label)
			}
		}
		for _, w := range windows.FindAllStringSubmatch(r.Expr, -1) {
			if !strings.HasSuffix(m[3], w[1]) {
				t.Errorf("%s: operations %s do not name the window %s", r.Record, m[3], w[1])
			}
		}
		checkExpr(t, r.Record, r.Expr, before, used)
		before[r.Record] = true
	}
}

// The alert rules use only the recording rules (the expressions the
// dashboard draws), say why and where to look, and are on sustained
// conditions: each rule's `for` is at least the longest range window of the
// rules it uses, so that one burst of events cannot keep it true long
// enough to fire.
func TestAlertsMatchMetrics(t *testing.T) {
	rs := readRules(t)
	anchors := runbookAnchors(t)
	if len(rs.alerts) < 4 {
		t.Fatalf("%d alert rules, want at least 4", len(rs.alerts))
	}
	isRecorded := make(map[string]bool)
	for name := range rs.recorded {
		isRecorded[name] = true
	}
	used := make(map[string]bool)
	for _, r := range rs.alerts {
		checkExpr(t, r.Alert, r.Expr, isRecorded, used)
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
		var longest time.Duration
		var visit func(expr string)
		visit = func(expr string) {
			for _, m := range windows.FindAllStringSubmatch(expr, -1) {
				w, _ := time.ParseDuration(m[1])
				longest = max(longest, w)
			}
			for _, n := range metricNames(expr) {
				visit(rs.recorded[n])
			}
		}
		visit(r.Expr)
		if longest == 0 {
			t.Errorf("%s: no range window in its rules", r.Alert)
		}
		if hold < longest {
			t.Errorf("%s: for %v is shorter than its window %v: one burst could fire it", r.Alert, hold, longest)
		}
	}
}

// Every alert has a unit test in which it fires, and one in which it must
// stay silent; every recording rule's value is tested; the unit tests load
// every rule file.
func TestEveryRuleIsUnitTested(t *testing.T) {
	b, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name          string
			AlertRuleTest []struct {
				AlertName string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
			PromQLExprTest []struct {
				Expr       string
				ExpSamples []any `yaml:"exp_samples"`
			} `yaml:"promql_expr_test"`
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	rs := readRules(t)
	for _, file := range rs.files {
		if !slices.Contains(f.RuleFiles, filepath.Base(file)) {
			t.Errorf("%s does not load %s", alertTestsFile, file)
		}
	}
	fires, silent, valued := map[string]int{}, map[string]int{}, map[string]int{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName]++
			} else {
				silent[a.AlertName]++
			}
		}
		for _, e := range tc.PromQLExprTest {
			for _, n := range metricNames(e.Expr) {
				if len(e.ExpSamples) > 0 {
					valued[n]++
				}
			}
		}
	}
	for _, r := range rs.alerts {
		if fires[r.Alert] == 0 || silent[r.Alert] == 0 {
			t.Errorf("%s: %d checks that it fires, %d that it stays silent; want both", r.Alert, fires[r.Alert], silent[r.Alert])
		}
	}
	for _, r := range rs.records {
		if valued[r.Record] == 0 {
			t.Errorf("%s: no promql_expr_test checks its value", r.Record)
		}
	}
}

// promtool checks every rule file and runs the unit tests (Debian package
// prometheus, which make test installs). The Makefile runs it as well.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if errors.Is(err, exec.ErrNotFound) {
		// Never skip: make test installs promtool (Debian package prometheus).
		t.Fatal("promtool not found on PATH: install the Debian package prometheus (make test does this when run as root)")
	}
	for _, args := range [][]string{append([]string{"check", "rules"}, readRules(t).files...), {"test", "rules", alertTestsFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The provisioning files are Grafana's: one Prometheus datasource, and a
// file provider whose path is where the README mounts the dashboard.
func TestGrafanaProvisioning(t *testing.T) {
	read := func(file string, v any) {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, Type, UID, Access, URL string
			IsDefault                    bool           `yaml:"isDefault"`
			Editable                     bool           `yaml:"editable"`
			JSONData                     map[string]any `yaml:"jsonData"`
		}
	}
	read(provisioningDir+"/datasources/prometheus.yml", &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL == "" {
		t.Errorf("datasources: %+v, want apiVersion 1 and one prometheus datasource with a url", ds)
	}
	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Folder, Type    string
			OrgID                 int  `yaml:"orgId"`
			AllowUIUpdates        bool `yaml:"allowUiUpdates"`
			DisableDeletion       bool `yaml:"disableDeletion"`
			UpdateIntervalSeconds int  `yaml:"updateIntervalSeconds"`
			Options               struct {
				Path                      string
				FoldersFromFilesStructure bool `yaml:"foldersFromFilesStructure"`
			}
		}
	}
	read(provisioningDir+"/dashboards/leasehold.yml", &dp)
	if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || dp.Providers[0].Options.Path == "" {
		t.Fatalf("dashboard providers: %+v, want apiVersion 1 and one file provider with a path", dp)
	}
	readme, err := os.ReadFile(provisioningDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if mount := "leasehold.json:" + dp.Providers[0].Options.Path + "/"; !strings.Contains(string(readme), mount) {
		t.Errorf("the README does not mount the dashboard under the provider's path (%s)", mount)
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
