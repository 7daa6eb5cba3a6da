"""Recall quality by mode: lexical, semantic and hybrid, on a labelled set of paraphrased questions.

bench/recall_quality.json holds 300 entries of a made-up project's knowledge and 300 questions
written by hand, each naming the one entry that answers it; most questions paraphrase their entry
(see its "about"). The entries are remembered into an empty workspace through the real service,
then every question is asked in each mode. Prints recall@1/5/10 and the mean reciprocal rank per
mode, overall and by question kind (paraphrase, partial, lexical).

    .venv/bin/python bench/recall_quality.py [--engine sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from pathlib import Path

from databases import engine_settings

from armarius.app import open_app
from armarius.auth.permissions import Kind, Role
from armarius.memory.service import RECALL_MODES, RememberRequest

SET = Path(__file__).with_name("recall_quality.json")
BY = "operator:bench"
CUTS = (1, 5, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default="sqlite", choices=("sqlite", "postgresql"))
    options = parser.parse_args()
    labelled = json.loads(SET.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as data, engine_settings(options.engine, Path(data)) as settings:
        app = open_app(settings)
        try:
            app.directory.create_workspace("quality", by=BY)
            app.directory.add_principal("reader", Kind.AGENT, workspace="quality", role=Role.EDITOR, by=BY)
            agent = app.directory.authenticate_token(app.directory.issue_token("reader", workspace="quality",
                                                                               by=BY).token)
            for entry in labelled["entries"]:
                app.memory.remember(agent, RememberRequest(entry["slug"], entry["title"], entry["body"],
                                                           tags=entry.get("tags"), confirm_distinct=True,
                                                           reason="a labelled set"))
            # ranks[mode][kind] is the place of the right entry for each question (None: not in the top 10).
            ranks: dict[str, dict[str, list[int | None]]] = {mode: defaultdict(list) for mode in RECALL_MODES}
            for question in labelled["questions"]:
                for mode in RECALL_MODES:
                    slugs = [hit["slug"] for hit in app.memory.recall(agent, question["question"], limit=10,
                                                                      mode=mode)["results"]]
                    place = slugs.index(question["answer"]) + 1 if question["answer"] in slugs else None
                    for kind in ("all", question.get("kind", "all")):
                        ranks[mode][kind].append(place)
        finally:
            app.close()
    kinds = ["all", *sorted({kind for by_kind in ranks.values() for kind in by_kind} - {"all"})]
    print(f"{len(labelled['entries'])} entries, {len(labelled['questions'])} questions ({options.engine})")
    print(f"{'questions':<18}{'mode':<10}" + "".join(f"{'R@' + str(cut):>8}" for cut in CUTS) + f"{'MRR':>8}")
    for kind in kinds:
        for mode in RECALL_MODES:
            places = ranks[mode][kind]
            cells = "".join(f"{sum(1 for p in places if p is not None and p <= cut) / len(places):>8.1%}"
                            for cut in CUTS)
            mrr = sum(1 / p for p in places if p is not None) / len(places)
            print(f"{kind + f' ({len(places)})':<18}{mode:<10}{cells}{mrr:>8.3f}")


if __name__ == "__main__":
    main()
