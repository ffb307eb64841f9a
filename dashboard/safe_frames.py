"""Tables as the viewer sees and downloads them: formula-safe text cells (OWASP CSV injection).

``st.dataframe`` draws cells as plain text, but its toolbar's "Download as CSV" writes them as they are;
a name beginning with = + - @ tab or CR would become a live formula in a spreadsheet. ``safe_frame``
prefixes such text cells (and column/index labels) with ' (``medhelm.safecsv.neutralize``); numbers are
untouched. Pure pandas, no Streamlit.
"""

from __future__ import annotations

import pandas as pd

from medhelm.safecsv import neutralize


def safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].map(neutralize)
    out.columns = [neutralize(c) if isinstance(c, str) else c for c in out.columns]
    if out.index.dtype == object:
        out.index = [neutralize(i) if isinstance(i, str) else i for i in out.index]
    return out
