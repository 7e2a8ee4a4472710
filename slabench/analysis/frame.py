"""Records as a pandas DataFrame, one row per request, for analysis of your own (a notebook, a plot, a join):

    from slabench.analysis.frame import records_frame
    df = records_frame("runs/x/records.jsonl")
    df[df.outcome == "ok"].groupby(["stage_unit", "stage_level"]).ttft_s.quantile(0.95)

The columns are the record's scalar fields (identity, stage with its unit, outcome and error category, token
counts, quality fields) plus each request's derived times in seconds, from the same formulas the aggregator uses
(`slabench.analysis.columns.request_times`): `ttft_s` (user-visible: from `scheduled` in open loop), `ttft_sent_s`,
`e2e_s`, `tpot_s`, `itl_mean_s`, `lateness_s` (open loop). NaN means no value: never a silent 0. Rows of every
outcome are kept; filter on `outcome` for the OK ones, as the aggregator does. Nothing is left out as warm-up
(`stage_phase` says which rows are warm-up or cool-down).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slabench.analysis.columns import itl_arrays, read_table, request_times
from slabench.core.extras import require
from slabench.core.sinks import ARROW_SCHEMA

if TYPE_CHECKING:
    import pandas as pd

LIST_COLUMNS = ("chunk_times", "chunk_tokens")
FIELDS = [f.name for f in ARROW_SCHEMA]  # every record field; the list ones only to derive the times


def records_frame(path: str | Path) -> pd.DataFrame:
    """The records at `path` (.jsonl, or a .parquet file or directory), checked as `slabench aggregate` checks them,
    with each request's derived times. Needs pandas (`pip install 'slabench[pandas]'`)."""
    require("pandas", "records_frame (records as a pandas DataFrame)")
    table = read_table(path, FIELDS)
    _, itl_mean = itl_arrays(table.column("chunk_times"), table.column("chunk_tokens"))
    df: pd.DataFrame = table.drop_columns(list(LIST_COLUMNS)).to_pandas()  # pyarrow has no stubs
    for name, values in request_times(table).items():
        df[f"{name}_s"] = values
    df["itl_mean_s"] = itl_mean
    return df
