"""Spreadsheets and Word documents as hospitals send them, on a corpus written here: dates stored as serials,
shared and inline strings, rich text, formulas with cached values, several sheets, merged headers, line
breaks and tabs. The readers use openpyxl and python-docx (the `data` extra); these tests pin what our
wrapper makes of their values (text for every cell, one row per record, file:row in errors)."""

from __future__ import annotations

import datetime as dt
import re
import zipfile
from pathlib import Path

import pytest

from medhelm.errors import ConfigError

openpyxl = pytest.importorskip("openpyxl")
docx = pytest.importorskip("docx")

from medhelm.benchmarks.loaders.readers import read_docx_paragraphs, read_xlsx  # noqa: E402


def _patch(path: Path, fixes: dict, add: dict[str, str]) -> None:
    """Rewrite parts of the .xlsx package (what Excel writes and openpyxl does not)."""
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename in fixes:
                data = fixes[item.filename](data.decode("utf-8")).encode("utf-8")
            dst.writestr(item, data)
        for name, text in add.items():
            dst.writestr(name, text)
    tmp.replace(path)


# Excel keeps text in a shared-string table: plain items and rich-text items (runs), CRLF kept as typed.
SHARED = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
          '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="2" uniqueCount="2">'
          '<si><t>Joe</t></si>'
          '<si><r><rPr><b/></rPr><t xml:space="preserve">shared </t></r><r><t>rich\r\ntext</t></r></si></sst>')


def _corpus(path: Path) -> None:
    from openpyxl.cell.rich_text import CellRichText, TextBlock
    from openpyxl.cell.text import InlineFont

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "cases"
    ws.append([None])  # an empty first row: the header is the first row with text
    ws.append(["Patient", None, "admitted", "dose", "note", "score", "flag"])
    ws.merge_cells("A2:B2")  # a merged header over two columns
    ws.append(["MRN-1", "Jane", dt.datetime(2024, 3, 1), 2.0, "line one\nline two\tTAB", 21, True])
    ws.append([None, None, None, None, None, None, None])  # a blank row
    ws.append(["MRN-2", "x", 45352, 0.5, CellRichText("bold ", TextBlock(InlineFont(b=True), "part")), None, False])
    ws["C5"].number_format = "yyyy-mm-dd"  # a date stored as its serial number, shown as a date
    ws["F5"] = "=F3*2"  # a formula; Excel stores its last value beside it
    ws["E6"] = "x"
    ws["A6"] = "MRN-3"
    wb.create_sheet("other").append(["x", "y"])
    wb.save(path)

    def excel_like(xml: str) -> str:
        xml = re.sub(r"<f>F3\*2</f>(<v\s*/>|<v></v>)?", "<f>F3*2</f><v>42</v>", xml)
        xml = re.sub(r'<c r="B5"([^>]*) t="inlineStr"><is><t>x</t></is></c>', r'<c r="B5"\1 t="s"><v>0</v></c>', xml)
        return re.sub(r'<c r="E6"([^>]*) t="inlineStr"><is><t>x</t></is></c>', r'<c r="E6"\1 t="s"><v>1</v></c>', xml)

    def with_shared(xml: str) -> str:
        return xml.replace("</Types>", '<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
                                       'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/></Types>')

    def rels(xml: str) -> str:
        return xml.replace("</Relationships>", '<Relationship Id="rIdSST" Type="http://schemas.openxmlformats.org/'
                                               'officeDocument/2006/relationships/sharedStrings" '
                                               'Target="sharedStrings.xml"/></Relationships>')

    _patch(path, {"xl/worksheets/sheet1.xml": excel_like, "[Content_Types].xml": with_shared,
                  "xl/_rels/workbook.xml.rels": rels}, {"xl/sharedStrings.xml": SHARED})


def test_xlsx_corpus_cell_by_cell(tmp_path):
    path = tmp_path / "cases.xlsx"
    _corpus(path)
    table = read_xlsx(path, ("Patient", "admitted"))
    assert list(table[0]) == ["Patient", "Patient (2)", "admitted", "dose", "note", "score", "flag"]
    assert table[0] == {"Patient": "MRN-1", "Patient (2)": "Jane", "admitted": "2024-03-01", "dose": "2",
                        "note": "line one\nline two\tTAB", "score": "21", "flag": "TRUE"}
    assert table[1] == {"Patient": "MRN-2", "Patient (2)": "Joe", "admitted": "2024-03-01", "dose": "0.5",
                        "note": "bold part", "score": "42", "flag": "FALSE"}
    assert table[2]["note"] == "shared rich\ntext" and table[2]["Patient"] == "MRN-3"
    assert table.lines == [3, 5, 6] and table.blank == 1
    # our text for every cell equals openpyxl's own value, rendered
    wb = openpyxl.load_workbook(path, data_only=True)
    assert wb["cases"]["C5"].value == dt.datetime(2024, 3, 1) and wb["cases"]["F5"].value == 42
    assert read_xlsx(path, sheet="other").path == path
    with pytest.raises(ConfigError, match="no sheet named 'nope'"):
        read_xlsx(path, sheet="nope")
    with pytest.raises(ConfigError, match=r"cases\.xlsx: sheet 'cases': missing column\(s\) 'label'"):
        read_xlsx(path, ("label",))


def test_xlsx_value_without_a_header_names_the_row(tmp_path):
    wb = openpyxl.Workbook()
    wb.active.append(["text", "result_human"])
    wb.active.append(["note", 1, "stray"])
    wb.save(tmp_path / "c.xlsx")
    with pytest.raises(ConfigError, match=r"c\.xlsx:2: sheet 'Sheet': a value in column 3 has no header"):
        read_xlsx(tmp_path / "c.xlsx")
    (tmp_path / "bad.xlsx").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match=r"bad\.xlsx: not a readable \.xlsx file"):
        read_xlsx(tmp_path / "bad.xlsx")


def test_docx_paragraph_by_paragraph(tmp_path):
    from docx.shared import RGBColor

    d = docx.Document()
    d.add_paragraph("First\tcolumn")
    p = d.add_paragraph("Before break")
    p.add_run().add_break()
    p.add_run("after break")
    r = d.add_paragraph().add_run("red text")
    r.font.color.rgb = RGBColor(255, 0, 0)
    dark = d.add_paragraph().add_run("dark red")
    dark.font.color.rgb = RGBColor(0xC0, 0, 0)
    d.add_table(rows=1, cols=1).cell(0, 0).text = "in a table"  # not a body paragraph (python-docx, upstream)
    d.save(str(tmp_path / "d.docx"))
    paras = read_docx_paragraphs(tmp_path / "d.docx")
    assert [p.text for p in paras] == ["First\tcolumn", "Before break\nafter break", "red text", "dark red"]
    assert [p.has_red for p in paras] == [False, False, True, False]
    assert [p.text for p in paras] == [p.text for p in docx.Document(str(tmp_path / "d.docx")).paragraphs]
    (tmp_path / "x.docx").write_bytes(b"PK\x03\x04 broken")
    with pytest.raises(ConfigError, match=r"x\.docx: not a readable \.docx file"):
        read_docx_paragraphs(tmp_path / "x.docx")
