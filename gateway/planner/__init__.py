"""Request -> vendor calls -> answer: capability verdicts, the plan and its fan-out, the gateway's
emulations, fallbacks and admission. Imports vendors and core."""
