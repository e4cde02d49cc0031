"""The fitters of what the engine learns from the development sets, each run from the
repository root as `python -m kb_eval.fit NAME` (docs/evaluation.md): the fusion of the two
legs, the answerability model, the extractive answerer's sentence model. They tune the engine,
so unlike the rest of kb_eval they may reach past its face for what it keeps inside (each
fitter's docstring says what)."""
