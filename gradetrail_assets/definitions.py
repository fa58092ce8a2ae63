"""What `dagster dev` loads. The asset graph per spec arrives in step 2."""

import dagster as dg

defs = dg.Definitions(assets=[])
