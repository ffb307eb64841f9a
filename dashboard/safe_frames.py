"""Tables as the viewer sees and downloads them: formula-safe text cells (OWASP CSV injection).

``st.dataframe`` draws cells as plain text, but its toolbar's "Download as CSV" writes them as they are;
a name beginning with = + - @ tab or CR would become a live formula in a spreadsheet. ``safe_frame``
prefixes such text cells (and column/index labels) with ' (``medhelm.safecsv.neutralize``), after showing
bidi and control characters as ``⟨U+XXXX⟩`` (``safe_text.visible``); numbers are untouched. Pure pandas,
no Streamlit.
"""

from __future__ import annotations

import pandas as pd

from medhelm.safecsv import neutralize
from safe_text import visible


def _texty(dtype: object) -> bool:
    """Columns that may hold text: object, and pandas 3's default ``str`` dtype (``dtype == object`` is False)."""
    return pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype)


def _cell(value: object) -> object:
    return neutralize(visible(value)) if isinstance(value, str) else value


def safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for col in out.columns:
        if _texty(out[col].dtype):
            out[col] = out[col].map(_cell)
    out.columns = [_cell(c) for c in out.columns]
    if _texty(out.index.dtype):
        out.index = [_cell(i) for i in out.index]
    return out
