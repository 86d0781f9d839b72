"""CSV downloads that a spreadsheet opens as data, never as formulas.

A cell that starts with `=`, `+`, `-` or `@` is a formula to Excel, LibreOffice and Google
Sheets, and a leading tab or carriage return lets one hide behind whitespace; end users name
themselves (`X-Mortar-End-User-Id`), so such a cell would run in a staff member's spreadsheet
(`=HYPERLINK("http://…")`). OWASP's "CSV Injection" advice is followed: such a text
cell gets a leading single quote, which spreadsheets show as text; the csv module quotes the
cell's commas and double quotes. Numbers are written as numbers.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable

from django.http import HttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: object) -> object:
    """The cell as written to the CSV: a text cell a spreadsheet would read as a formula is
    prefixed with a single quote; anything else is unchanged."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return f"'{cell}"
    return cell


def csv_response(rows: Iterable[Iterable[object]], filename: str) -> HttpResponse:
    """The rows as a CSV attachment named `filename`, every text cell spreadsheet-safe."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    for row in rows:
        writer.writerow([spreadsheet_safe(cell) for cell in row])
    return response
