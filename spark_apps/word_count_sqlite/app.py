"""spark-submit entry point of word_count_sqlite (word_count, its counts in SQLite).

spark-submit spark_apps/word_count_sqlite/app.py \
    --spec spark_apps/word_count_sqlite/word_count_sqlite.yaml
"""

import sys
from pathlib import Path

from statekeeper.app.launcher import main

if __name__ == "__main__":
    sys.exit(main(default_spec=Path(__file__).with_name("word_count_sqlite.yaml")))
