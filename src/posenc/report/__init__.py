"""The self-contained HTML report: ``posenc report -o DIR`` or :func:`build_report`."""

from posenc.report.builder import benchmark_report, build_report, encoding_section

__all__ = ["benchmark_report", "build_report", "encoding_section"]
