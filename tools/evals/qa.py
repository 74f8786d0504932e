"""A short factual-QA task written for this project: common facts a 135M model partly knows.

Three-shot prompt "Q: ...\\nA: ..."; the answer is the completion's first line; it is correct
when one of the item's accepted answers appears in it as a whole word (case-insensitive).
"""
from __future__ import annotations

import re

from tools.evals.tasks import Item, Task

SHOTS = [("What is the capital of Italy?", "Rome"), ("How many legs does a spider have?", "Eight"),
         ("Who wrote Romeo and Juliet?", "William Shakespeare")]

# (question, accepted answers separated by '|')
FACTS = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Germany?", "Berlin"),
    ("What is the capital of Spain?", "Madrid"),
    ("What is the capital of the United Kingdom?", "London"),
    ("What is the capital of Russia?", "Moscow"),
    ("What is the capital of China?", "Beijing|Peking"),
    ("What is the capital of Egypt?", "Cairo"),
    ("What is the capital of Canada?", "Ottawa"),
    ("What is the capital of Australia?", "Canberra"),
    ("What is the largest planet in the solar system?", "Jupiter"),
    ("Which planet is known as the Red Planet?", "Mars"),
    ("How many days are there in a week?", "seven|7"),
    ("How many continents are there on Earth?", "seven|7"),
    ("What is the chemical formula for water?", "H2O"),
    ("What gas do plants absorb from the air to make food?", "carbon dioxide|CO2"),
    ("At how many degrees Celsius does water freeze?", "0|zero"),
    ("At how many degrees Celsius does water boil?", "100|one hundred"),
    ("Who painted the Mona Lisa?", "Leonardo|da Vinci"),
    ("Who was the first President of the United States?", "Washington"),
    ("What is the largest ocean on Earth?", "Pacific"),
    ("What is the tallest mountain in the world?", "Everest"),
    ("What is the longest river in Africa?", "Nile"),
    ("What language is mainly spoken in Brazil?", "Portuguese"),
    ("What is the currency of Japan?", "yen"),
    ("How many sides does a triangle have?", "three|3"),
    ("Which animal is known as the king of the jungle?", "lion"),
    ("What color is the sky on a clear day?", "blue"),
    ("What is the star at the center of our solar system?", "Sun"),
    ("In which country are the pyramids of Giza?", "Egypt"),
    ("What is the square root of 81?", "nine|9"),
    ("Who developed the theory of relativity?", "Einstein"),
]


def prompt_for(question: str) -> str:
    shots = "".join(f"Q: {q}\nA: {a}\n\n" for q, a in SHOTS)
    return f"Answer each question with a short fact.\n\n{shots}Q: {question}\nA:"


class FactQA(Task):
    name = "qa"
    max_tokens = 16
    stop = ["\n"]

    def __init__(self, items: list[Item] | None = None):
        super().__init__(items if items is not None else [
            Item(id=f"qa-{i:02d}", prompt=prompt_for(q), gold=a, question=q) for i, (q, a) in enumerate(FACTS)])

    def extract(self, text: str) -> str | None:
        first = text.strip().split("\n")[0].strip()
        return first or None

    def score(self, answer: str | None, gold: str) -> bool:
        if not answer:
            return False
        return any(re.search(rf"(?<![\w]){re.escape(g)}(?![\w])", answer, re.IGNORECASE) for g in gold.split("|"))
