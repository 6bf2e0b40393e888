#!/usr/bin/env python3
"""Checks that monitoring files use only metrics vmod-redis really emits.

    metric_names.py EXPOSITION FILE...

EXPOSITION: a real redis.stats(format = prometheus, db = "*", extended =
true) output. FILE: a Grafana dashboard (.json, which must parse) or a
Prometheus rules file (.yml). Every metric name in their PromQL
expressions must be a family of EXPOSITION, and every label a selector
matches on must be one that family has (or one Prometheus adds: instance,
job). Exits 1 with the list of what is wrong.
"""
import json
import re
import sys

# PromQL words that are not metric names.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk",
    "quantile", "count_values", "group", "by", "without", "on", "ignoring",
    "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "resets",
    "changes", "abs", "absent", "absent_over_time", "ceil", "floor", "round",
    "clamp", "clamp_min", "clamp_max", "histogram_quantile", "label_replace",
    "label_join", "label_values", "sort", "sort_desc", "time", "timestamp",
    "vector", "scalar", "avg_over_time", "min_over_time", "max_over_time",
    "sum_over_time", "count_over_time", "last_over_time", "predict_linear",
    "humanize", "humanizePercentage", "inf", "nan",
}
ADDED_BY_PROMETHEUS = {"instance", "job"}


def exposition_labels(text):
    """{family: set of label names} of an exposition."""
    families = {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$')
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.setdefault(line.split(" ")[2], set())
        elif line and not line.startswith("#"):
            m = sample.match(line)
            if not m:
                sys.exit("not a sample line: %r" % line)
            labels = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(2) or "")
            families.setdefault(m.group(1), set()).update(labels)
    return families


def expressions_of_dashboard(doc):
    """Every PromQL text of a dashboard: targets' expr, variables' queries."""
    found = []

    def walk(node, key=None):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, str) and key in ("expr", "query", "definition"):
            if node != "prometheus":  # the datasource variable's type
                found.append(node)

    walk(doc)
    return found


def expressions_of_rules(text):
    """The expr of each rule (one line, or a `|` block)."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r'^(\s*)expr:\s*(.*)$', lines[i])
        i += 1
        if not m:
            continue
        if m.group(2) not in ("|", ">", "|-", ">-"):
            found.append(m.group(2))
            continue
        indent, block = len(m.group(1)), []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            block.append(lines[i])
            i += 1
        found.append("\n".join(block))
    return found


def selectors(expr):
    """(metric, [label names matched]) of each selector of an expression."""
    expr = re.sub(r'\$__\w+|\$\w+', "", expr)  # Grafana variables
    out = []
    # Grafana's label_values(SELECTOR, LABEL): LABEL must be one of its.
    m = re.fullmatch(r'\s*label_values\((.*),\s*([a-zA-Z_]\w*)\s*\)\s*', expr)
    if m:
        found = selectors(m.group(1))
        return [(name, labels + [m.group(2)]) for name, labels in found]
    # Drop grouping lists, durations and strings outside selectors first.
    work = re.sub(r'\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', " ", expr)
    work = re.sub(r'\[[^\]]*\]', " ", work)
    for m in re.finditer(r'([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{[^}]*\})?', work):
        name, matchers = m.group(1), m.group(2)
        if not name and not matchers:
            continue
        if name and (name in PROMQL_WORDS or re.fullmatch(r'[0-9.e]+', name)):
            name = None
        after = work[m.end():].lstrip()
        if name and after.startswith("(") and not matchers:
            name = None  # a function call
        if name is None and not matchers:
            continue
        labels = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)', matchers or "")
        out.append((name, labels))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        families = exposition_labels(f.read())
    if not families:
        sys.exit("%s: no metric at all" % sys.argv[1])
    wrong = []
    for path in sys.argv[2:]:
        with open(path) as f:
            text = f.read()
        if path.endswith(".json"):
            try:
                exprs = expressions_of_dashboard(json.loads(text))
            except json.JSONDecodeError as e:
                sys.exit("%s: not JSON: %s" % (path, e))
        else:
            exprs = expressions_of_rules(text)
        if not exprs:
            wrong.append("%s: no expression found" % path)
        used, before = 0, len(wrong)
        for expr in exprs:
            for name, labels in selectors(expr):
                if name is None:
                    wrong.append("%s: a selector without a metric name: %r" % (path, expr))
                    continue
                used += 1
                if name not in families:
                    wrong.append("%s: %s is not in the output" % (path, name))
                    continue
                for label in labels:
                    if label not in families[name] | ADDED_BY_PROMETHEUS:
                        wrong.append("%s: %s has no label %s" % (path, name, label))
        if len(wrong) == before:
            print("%s: %d expressions, %d metric selectors, all in the output" % (path, len(exprs), used))
    if wrong:
        sys.exit("\n".join(sorted(set(wrong))))


main()
