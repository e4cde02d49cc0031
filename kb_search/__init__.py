"""The engine that answers questions: planner, synonyms, hybrid search, rerankers, the
answerability decision, answerers with their verification, and evaluation. A library: the query
service, the `kb` command and the Dagster evaluation each build it through `build_engine`."""
