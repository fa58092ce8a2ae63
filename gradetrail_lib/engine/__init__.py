"""The engine: plan -> responses -> scorer calls -> records -> run directory."""
