// Package render renders `runner report`: report.md and a self-contained report.html whose
// inline SVG charts are drawn from the same Report as the Markdown. Its subpackage table is the
// one table model and renderer (text, Markdown, CSV, JSON, HTML) that every report uses; it
// lives apart because this package imports reports/compare, and compare, history, the run
// summary and nsys render tables too.
package render
