"""The self-contained HTML report: ``posenc report -o DIR`` or :func:`build_report`."""

from posenc.report.builder import build_report, encoding_section

__all__ = ["build_report", "encoding_section"]
