// Package monitoring checks the operations pack in config/monitoring: the kube-state-metrics
// configuration against the CRD, the alerting rules with promtool, and the names of the metrics
// the rules and the dashboard query. The check of those names against a running controller's
// /metrics is in test/e2e (monitoring_test.go), which runs the controller; this package gives it
// the names.
package monitoring

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

var (
	promqlStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// Grafana's label_values(query, label): the label is not a metric.
	labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
)

// promqlWords are PromQL's keywords and literals, which look like metric names.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
	"atan2": true,
}

// MetricNames returns the metric names a PromQL expression (or a Grafana label_values query)
// selects, sorted and without duplicates. It is a lexer, not a parser: string literals, label
// matchers, ranges and grouping labels are removed first; what is left that is an identifier, not
// a keyword, not a function (followed by "(") and not part of a number or a $variable is a metric.
func MetricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	s := promqlStrings.ReplaceAllString(expr, `""`)
	s = promqlMatchers.ReplaceAllString(s, "{}")
	s = promqlRanges.ReplaceAllString(s, "")
	s = promqlGrouping.ReplaceAllString(s, "")
	set := map[string]bool{}
	for _, loc := range promqlIdent.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		if promqlWords[strings.ToLower(word)] || partOfLiteral(s, loc[0]) || strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") {
			continue
		}
		set[word] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// partOfLiteral: the identifier at i continues a number (1e3, 5m) or names a $variable.
func partOfLiteral(s string, i int) bool {
	if i == 0 {
		return false
	}
	c := s[i-1]
	return c == '$' || c == '.' || (c >= '0' && c <= '9')
}
